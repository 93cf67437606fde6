//! One canonical form of a request path, so that a limit on `/export`
//! cannot be slipped past by spelling `/export` another way.
//!
//! Upstreams such as nginx serve `//export`, `/%65xport`, `/./export` and
//! `/x/../export` as `/export`. Rules therefore match on the canonical
//! form, which is (RFC 3986 §6.2.2):
//!
//! - percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`)
//!   decoded, and every other escape written with upper-case hex
//!   (`%2f` → `%2F`);
//! - bytes a path may not hold literally (space, `"`, `<`, non-ASCII, …)
//!   percent-encoded, so `/café` and `/caf%C3%A9` are one path;
//! - dot segments removed (RFC 3986 §5.2.4), after decoding: `%2e%2e` is
//!   `..`;
//! - repeated slashes merged into one; a trailing slash is kept.
//!
//! Some spellings are refused instead, because upstreams disagree on what
//! they mean and no single canonical form is safe:
//!
//! - an encoded `/` (`%2F`), an encoded `\` (`%5C`) or an encoded NUL
//!   (`%00`), and a literal NUL (whose canonical form would be `%00`);
//! - a literal `\` (some servers read it as `/`);
//! - a `..` that climbs above the root (`/../etc`), as nginx refuses it;
//! - a malformed escape (`%zz`, `%4`), or a path that does not start with
//!   `/` (`*`, the asterisk form of `OPTIONS`, is kept as it is).
//!
//! The proxy forwards the canonical path, so what was limited is what the
//! upstream serves.
//!
//! ```
//! use sluice_policy::path::{canonical, PathError};
//!
//! for spelling in ["/export", "//export", "/%65xport", "/./export", "/x/../export"] {
//!     assert_eq!(canonical(spelling).unwrap(), "/export");
//! }
//! assert_eq!(canonical("/a%2fb"), Err(PathError::EncodedSeparator));
//! assert_eq!(canonical("/../etc/passwd"), Err(PathError::AboveRoot));
//! ```

use std::borrow::Cow;

/// Why a path has no canonical form and is refused (with 400).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// The path does not start with `/`.
    #[error("the path must start with `/`")]
    NotAbsolute,
    /// A `%` not followed by two hex digits.
    #[error("the path has a malformed percent-escape")]
    BadEscape,
    /// `%2F`, `%5C` or `%00`: upstreams read them differently. A literal
    /// NUL is refused the same way, as its canonical form would be `%00`.
    #[error("the path has an encoded `/` or `\\`, or a NUL, which servers read differently")]
    EncodedSeparator,
    /// A literal `\`, which some servers read as `/`.
    #[error("the path has a `\\`, which some servers read as `/`")]
    Backslash,
    /// A `..` segment with nothing left to remove.
    #[error("the path climbs above the root with `..`")]
    AboveRoot,
}

/// The canonical form of `raw`, a request's path without its query.
/// Borrowed when `raw` is canonical already (the usual case: one scan, no
/// allocation).
#[inline]
pub fn canonical(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if is_canonical(raw.as_bytes()) || raw == "*" {
        return Ok(Cow::Borrowed(raw));
    }
    rewritten(raw)
}

/// Whether `raw` has a canonical form (see [`canonical`]), for a caller
/// that only checks it: no rewriting, and no allocation but for a path
/// that is not canonical already.
///
/// ```
/// use sluice_policy::path::{PathError, check};
/// assert_eq!(check("/export"), Ok(()));
/// assert_eq!(check("//export/./"), Ok(()));
/// assert_eq!(check("/a/../.."), Err(PathError::AboveRoot));
/// ```
#[inline]
pub fn check(raw: &str) -> Result<(), PathError> {
    if is_canonical(raw.as_bytes()) || raw == "*" {
        return Ok(());
    }
    rewritten(raw).map(drop)
}

/// The canonical form of a path that is not canonical already.
fn rewritten(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if raw.is_empty() {
        return Ok(Cow::Borrowed("/"));
    }
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(PathError::NotAbsolute);
    };
    let mut out = String::with_capacity(raw.len() + 8);
    // Where each kept segment's `/` is in `out`, for `..` to remove it.
    let mut starts: Vec<usize> = Vec::new();
    let mut segment = String::new();
    let mut trailing_slash = false;
    let mut parts = rest.split('/').peekable();
    while let Some(part) = parts.next() {
        let last = parts.peek().is_none();
        segment.clear();
        normalize_segment(part, &mut segment)?;
        match segment.as_str() {
            "" | "." => {}
            ".." => {
                let start = starts.pop().ok_or(PathError::AboveRoot)?;
                out.truncate(start);
            }
            s => {
                starts.push(out.len());
                out.push('/');
                out.push_str(s);
            }
        }
        // `/a/`, `/a/.` and `/a/b/..` end in a slash; `/a` does not.
        trailing_slash = last && matches!(segment.as_str(), "" | "." | "..");
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    Ok(Cow::Owned(out))
}

/// Unreserved characters (RFC 3986 §2.3): never escaped in the canonical
/// form.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Bytes a path segment holds literally in the canonical form: unreserved,
/// sub-delims, `:` and `@` (RFC 3986 §3.3). A `%` starts an escape.
fn literal(b: u8) -> bool {
    unreserved(b)
        || matches!(
            b,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
        )
}

/// Whether a path is canonical already: it starts with `/`, holds only
/// literal bytes, `/` and escapes in canonical form, and has no empty
/// segment (but a last one) and no dot segment.
fn is_canonical(path: &[u8]) -> bool {
    let Some((&b'/', rest)) = path.split_first() else {
        return false;
    };
    // The current segment's length, and how many of its bytes are dots.
    let (mut len, mut dots) = (0usize, 0usize);
    let mut i = 0;
    while i < rest.len() {
        let b = rest[i];
        if b == b'/' {
            if len == 0 || dots == len && len <= 2 {
                return false;
            }
            (len, dots) = (0, 0);
        } else if b == b'%' {
            if !canonical_escape(rest.get(i + 1..i + 3)) {
                return false;
            }
            len += 3;
            i += 2;
        } else if literal(b) {
            len += 1;
            dots += usize::from(b == b'.');
        } else {
            return false;
        }
        i += 1;
    }
    !(len > 0 && dots == len && len <= 2)
}

/// Whether the two bytes after a `%` are an escape the canonical form
/// keeps: upper-case hex, of a byte that is neither unreserved nor refused.
fn canonical_escape(digits: Option<&[u8]>) -> bool {
    let Some(&[hi, lo]) = digits else {
        return false;
    };
    let upper = |d: u8| d.is_ascii_digit() || (b'A'..=b'F').contains(&d);
    if !upper(hi) || !upper(lo) {
        return false;
    }
    match (hex(hi), hex(lo)) {
        (Some(hi), Some(lo)) => {
            let b = hi << 4 | lo;
            !unreserved(b) && !matches!(b, b'/' | b'\\' | 0)
        }
        _ => false,
    }
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

fn push_escaped(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0xf)]));
}

/// One segment (no `/` inside) in canonical form, appended to `out`.
fn normalize_segment(part: &str, out: &mut String) -> Result<(), PathError> {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).copied().and_then(hex),
                bytes.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(PathError::BadEscape);
            };
            let decoded = hi << 4 | lo;
            if matches!(decoded, b'/' | b'\\' | 0) {
                return Err(PathError::EncodedSeparator);
            }
            if unreserved(decoded) {
                out.push(char::from(decoded));
            } else {
                push_escaped(out, decoded);
            }
            i += 3;
        } else if b == b'\\' {
            return Err(PathError::Backslash);
        } else if b == 0 {
            // Escaped, it would be `%00`, which is refused above: the
            // canonical form must itself be canonical.
            return Err(PathError::EncodedSeparator);
        } else {
            if literal(b) {
                out.push(char::from(b));
            } else {
                push_escaped(out, b);
            }
            i += 1;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spellings_of_one_path_are_one_path() {
        for (raw, want) in [
            ("/export", "/export"),
            ("//export", "/export"),
            ("/%65xport", "/export"),
            ("/%65XPORT", "/eXPORT"),
            ("/./export", "/export"),
            ("/x/../export", "/export"),
            ("/%2e/export", "/export"),
            ("/x/%2E%2e/export", "/export"),
            ("/export/", "/export/"),
            ("/export//", "/export/"),
            ("/a/b/..", "/a/"),
            ("/a/.", "/a/"),
            ("/a/b/../../c", "/c"),
            ("", "/"),
            ("/", "/"),
            ("///", "/"),
            ("/..a/.b./...", "/..a/.b./..."),
            ("/caf%c3%a9", "/caf%C3%A9"),
            ("/café", "/caf%C3%A9"),
            ("/a b", "/a%20b"),
            ("/a%3fb", "/a%3Fb"),
            ("/%25", "/%25"),
            ("/a;b=c,d", "/a;b=c,d"),
            ("*", "*"),
        ] {
            assert_eq!(canonical(raw).as_deref(), Ok(want), "{raw:?}");
        }
    }

    #[test]
    fn ambiguous_spellings_are_refused() {
        for (raw, err) in [
            ("/a%2Fb", PathError::EncodedSeparator),
            ("/a%2fb", PathError::EncodedSeparator),
            ("/a%5cb", PathError::EncodedSeparator),
            ("/a%00", PathError::EncodedSeparator),
            // Found by the `path` fuzz target: a literal NUL was escaped to
            // `%00`, a canonical form that was itself refused.
            ("/a\0", PathError::EncodedSeparator),
            ("/expor\0//", PathError::EncodedSeparator),
            ("/a\\b", PathError::Backslash),
            ("/..", PathError::AboveRoot),
            ("/../etc/passwd", PathError::AboveRoot),
            ("/a/../../b", PathError::AboveRoot),
            ("/%2e%2e/x", PathError::AboveRoot),
            ("/a%", PathError::BadEscape),
            ("/a%4", PathError::BadEscape),
            ("/a%zz", PathError::BadEscape),
            ("export", PathError::NotAbsolute),
        ] {
            assert_eq!(canonical(raw), Err(err), "{raw:?}");
        }
    }

    #[test]
    fn a_canonical_path_is_borrowed() {
        for raw in [
            "/",
            "/export",
            "/a/b/",
            "/v1/keys/alice;x=1",
            "/..a",
            "/a%20b%C3%A9",
        ] {
            assert!(
                matches!(canonical(raw), Ok(Cow::Borrowed(_))),
                "{raw:?} should need no copy"
            );
        }
    }

    /// A dot segment: `.` or `..`.
    fn has_dot_segment(path: &str) -> bool {
        path.split('/').any(|s| s == "." || s == "..")
    }

    proptest! {
        #[test]
        fn canonical_is_idempotent_and_leaves_no_dot_segment(raw in "/[a-zA-Z0-9./%_~ :@é-]{0,24}") {
            if let Ok(once) = canonical(&raw) {
                prop_assert!(!has_dot_segment(&once), "{:?}", once);
                prop_assert!(!once.contains("//"), "{:?}", once);
                let twice = canonical(&once);
                prop_assert_eq!(twice.as_deref(), Ok(&*once));
                prop_assert!(matches!(twice, Ok(Cow::Borrowed(_))));
            }
        }

        #[test]
        fn respelling_does_not_change_the_path(
            segments in proptest::collection::vec("[a-z0-9_~-]{1,6}", 1..5),
            encode in proptest::collection::vec(any::<bool>(), 30),
            noise in proptest::collection::vec(0u8..4, 5),
        ) {
            let plain = format!("/{}", segments.join("/"));
            let mut spelled = String::new();
            for (i, s) in segments.iter().enumerate() {
                match noise.get(i).copied().unwrap_or(0) {
                    1 => spelled.push_str("/."),
                    2 => spelled.push('/'),
                    3 => spelled.push_str("/zz/.."),
                    _ => {}
                }
                spelled.push('/');
                for (j, b) in s.bytes().enumerate() {
                    if encode.get((i * 6 + j) % encode.len()).copied().unwrap_or(false) {
                        spelled.push_str(&format!("%{b:02x}"));
                    } else {
                        spelled.push(char::from(b));
                    }
                }
            }
            let got = canonical(&spelled);
            prop_assert_eq!(got.as_deref(), Ok(plain.as_str()), "{}", spelled);
        }
    }
}
