//! A descriptor node's `value`: exact, or a pattern in which each `*`
//! stands for zero or more characters, anywhere and any number of times
//! (`premium-*`, `bar*b`, `foo*bar*baz`, `/api*v1`), as in
//! envoyproxy/ratelimit. A value without `*` matches only itself.

/// A compiled `value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    /// No `*`: the value itself.
    Exact(String),
    /// The literal pieces between the `*`s, at least two: the first must
    /// start the value, the last must end it, and the ones between must
    /// appear in order, without overlapping, in what is left.
    Wildcard(Vec<String>),
}

impl Pattern {
    /// Compiles a node's `value`.
    pub fn new(value: &str) -> Self {
        if value.contains('*') {
            Self::Wildcard(value.split('*').map(str::to_owned).collect())
        } else {
            Self::Exact(value.to_owned())
        }
    }

    /// Whether the pattern has a `*`.
    pub fn is_wildcard(&self) -> bool {
        matches!(self, Self::Wildcard(_))
    }

    /// Whether `value` matches. Linear in the value's length for each
    /// piece; nothing is allocated.
    pub fn matches(&self, value: &str) -> bool {
        let parts = match self {
            Self::Exact(v) => return v == value,
            Self::Wildcard(parts) => parts,
        };
        let (Some(first), Some(last)) = (parts.first(), parts.last()) else {
            return false;
        };
        let fixed: usize = parts.iter().map(String::len).sum();
        if value.len() < fixed || !value.starts_with(first.as_str()) {
            return false;
        }
        if !value.ends_with(last.as_str()) {
            return false;
        }
        // The middle pieces, in order, between the first and the last.
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in &parts[1..parts.len() - 1] {
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, value: &str) -> bool {
        Pattern::new(pattern).matches(value)
    }

    #[test]
    fn a_star_matches_zero_or_more_characters_anywhere() {
        // The reference server's README: `bar*b` matches `barab` and
        // `barb`; `foo*bar*baz` needs both pieces in order.
        assert!(m("bar*b", "barab") && m("bar*b", "barb") && !m("bar*b", "bara"));
        assert!(m("foo*bar*baz", "foo-bar-baz") && m("foo*bar*baz", "foobarbaz"));
        assert!(!m("foo*bar*baz", "foo-baz-bar"));
        assert!(m("/api*v1", "/api/users/v1") && !m("/api*v1", "/api/v2"));
        assert!(m("premium-*", "premium-") && m("premium-*", "premium-gold"));
        assert!(m("*", "") && m("*", "anything") && m("**", "x"));
        assert!(m("*-end", "the-end") && !m("*-end", "the-en"));
    }

    #[test]
    fn pieces_never_overlap() {
        // `ab*ba` needs four characters at least: `aba` has the prefix and
        // the suffix only by sharing its middle `b`.
        assert!(!m("ab*ba", "aba"));
        assert!(m("ab*ba", "abba"));
        assert!(!m("a*aa*a", "aaa"));
        assert!(m("a*aa*a", "aaaa"));
    }

    #[test]
    fn exact_values_match_only_themselves() {
        assert!(m("gold", "gold") && !m("gold", "golden") && !m("gold", ""));
        assert!(!Pattern::new("gold").is_wildcard() && Pattern::new("g*").is_wildcard());
    }
}
