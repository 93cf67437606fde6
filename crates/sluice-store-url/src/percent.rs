//! Percent-decoding of the user name, password and master name.

/// Decodes `%XX` escapes; the result must be UTF-8. The error never
/// contains the input.
pub(crate) fn percent_decode(s: &str) -> Result<String, &'static str> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or("truncated `%` escape")?;
            let hi = hex_value(hex[0]).ok_or("bad `%` escape")?;
            let lo = hex_value(hex[1]).ok_or("bad `%` escape")?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 after percent-decoding")
}

/// The value of one hexadecimal digit, either case.
fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%40b%3Ac%2f").unwrap(), "a@b:c/");
        assert!(percent_decode("%4").is_err());
        assert!(percent_decode("%zz").is_err());
        assert!(percent_decode("%ff").is_err());
    }
}
