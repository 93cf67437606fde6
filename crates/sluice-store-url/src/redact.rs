//! Hiding the password of a store URL that may not even parse.

/// `s` with anything that could be a password replaced by `***`: the text
/// between the first `:` of the user-info and its last `@`. Without a
/// scheme, everything before the last `@` is hidden.
pub fn redact(s: &str) -> String {
    let (scheme, rest) = match s.find("://") {
        Some(i) => (&s[..i + 3], &s[i + 3..]),
        None => ("", s),
    };
    let Some(at) = rest.rfind('@') else {
        return s.to_owned();
    };
    let (userinfo, hosts) = (&rest[..at], &rest[at..]);
    if scheme.is_empty() {
        return format!("***{hosts}");
    }
    match userinfo.find(':') {
        Some(colon) => format!("{scheme}{}:***{hosts}", &userinfo[..colon]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_of_raw_strings() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:s@cr@t@h:1"), "redis://:***@h:1");
        assert_eq!(redact("u:secret@h:1"), "***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
