//! A set of header field names that a proxy removes from messages.

use http::{HeaderMap, HeaderName};

/// Header field names, with a mask of their lengths: a field whose name has
/// none of those lengths is passed over without comparing it with each.
#[derive(Debug)]
pub struct NameSet {
    names: Vec<HeaderName>,
    /// Bit `n` for a name of `n` bytes; names of 63 bytes or more share
    /// bit 63.
    lengths: u64,
}

fn length_bit(name: &HeaderName) -> u64 {
    1 << name.as_str().len().min(63)
}

impl NameSet {
    /// The set of `names`.
    pub fn new(names: impl IntoIterator<Item = HeaderName>) -> Self {
        let names: Vec<HeaderName> = names.into_iter().collect();
        let lengths = names.iter().fold(0, |m, n| m | length_bit(n));
        Self { names, lengths }
    }

    /// Whether `name` is in the set.
    pub fn contains(&self, name: &HeaderName) -> bool {
        self.lengths & length_bit(name) != 0 && self.names.contains(name)
    }

    /// Removes every field named in the set from `headers`. Most messages
    /// carry none of them: one pass over the fields finds those there,
    /// where removing each name would look each up (a hash and a probe,
    /// about 200 instructions a name).
    pub fn remove_from(&self, headers: &mut HeaderMap) {
        let there: Vec<HeaderName> = headers
            .keys()
            .filter(|k| self.contains(k))
            .cloned()
            .collect();
        if there.is_empty() {
            return;
        }
        for n in there {
            headers.remove(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_names_in_the_set_go_whatever_their_length() {
        let long = |c: &str| HeaderName::from_bytes(c.repeat(70).as_bytes()).unwrap();
        let set = NameSet::new([
            long("a"),
            HeaderName::from_static("te"),
            http::header::CONNECTION,
        ]);
        let mut h = HeaderMap::new();
        // Another name of each length, and the names in the set.
        for name in [long("b"), long("a"), HeaderName::from_static("user-agent")] {
            h.append(name, "1".parse().unwrap());
        }
        for name in ["tf", "te", "connection", "x-api-key"] {
            h.append(HeaderName::from_static(name), "1".parse().unwrap());
        }
        set.remove_from(&mut h);
        let mut left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        let b = "b".repeat(70);
        assert_eq!(left, [b.as_str(), "tf", "user-agent", "x-api-key"]);
    }
}
