//! The host a request names, and when it names one ambiguously.
//!
//! `match.host` reads the `Host` field, and a proxy forwards it. A request
//! that gives the field twice (or a list of hosts on one line) could be
//! matched on one host and served by an upstream reading another, so it is
//! refused, as RFC 9112 §3.2 says a server must. So is a `Host` with
//! userinfo (`user@host`), which no client has a reason to send, and one
//! that is not an authority at all.

use http::HeaderMap;
use http::header::HOST;

/// Why a request's host is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// `Host` given on more than one line, or several hosts on one line.
    #[error("the request has more than one Host value, so which host it is is ambiguous")]
    Repeated,
    /// An HTTP/1.1 request without `Host` (and no host in its target).
    #[error("an HTTP/1.1 request must carry a Host field")]
    Missing,
    /// A `Host` with userinfo (`user@host`).
    #[error("the Host field may not carry userinfo (`user@`)")]
    UserInfo,
    /// A `Host` that is not a host and port.
    #[error("the Host field is not a valid host")]
    Invalid,
    /// A request target in absolute form (or HTTP/2's `:authority`) that
    /// names another host than the `Host` field.
    #[error("the request's target and its Host field name different hosts")]
    Conflict,
}

const BAD: u8 = 0;
const OK: u8 = 1;
const LIST: u8 = 2;
const USERINFO: u8 = 3;

/// What each byte of a `Host` value is: allowed in a host and port
/// (unreserved, `%`, sub-delims but `,`, `:`, `[` and `]`), a list
/// separator, userinfo's `@`, or not allowed.
const HOST_BYTE: [u8; 256] = {
    let mut t = [BAD; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        if c.is_ascii_alphanumeric() {
            t[b] = OK;
        }
        b += 1;
    }
    let allowed = b"-._~%:[]!$&'()*+;=";
    let mut i = 0;
    while i < allowed.len() {
        t[allowed[i] as usize] = OK;
        i += 1;
    }
    t[b',' as usize] = LIST;
    t[b'@' as usize] = USERINFO;
    t
};

/// Checks the `Host` field of `headers`: at most one line, one host, no
/// userinfo. An absent or empty field passes here (HTTP/1.0, or a target
/// without an authority); the HTTP adapter, which knows the version and
/// the target, checks the rest.
pub fn check(headers: &HeaderMap) -> Result<(), HostError> {
    let mut lines = headers.get_all(HOST).iter();
    let Some(host) = lines.next() else {
        return Ok(());
    };
    if lines.next().is_some() {
        return Err(HostError::Repeated);
    }
    // One pass over the bytes, no copy: a host is a reg-name, an IPv4
    // address or a bracketed IPv6 one, and a port (RFC 3986 §3.2.2).
    for &b in host.as_bytes() {
        match HOST_BYTE[usize::from(b)] {
            OK => {}
            LIST => return Err(HostError::Repeated),
            USERINFO => return Err(HostError::UserInfo),
            _ => return Err(HostError::Invalid),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hosts(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(HOST, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn one_host_passes() {
        for ok in [
            &[][..],
            &[""],
            &["api.example.com"],
            &["api.example.com:8443"],
            &["[2001:db8::1]:80"],
            &["192.0.2.1"],
        ] {
            assert_eq!(check(&hosts(ok)), Ok(()), "{ok:?}");
        }
    }

    #[test]
    fn ambiguous_hosts_are_refused() {
        assert_eq!(
            check(&hosts(&["a.test", "b.test"])),
            Err(HostError::Repeated)
        );
        assert_eq!(
            check(&hosts(&["a.test", "a.test"])),
            Err(HostError::Repeated)
        );
        assert_eq!(check(&hosts(&["a.test, b.test"])), Err(HostError::Repeated));
        assert_eq!(check(&hosts(&["user@a.test"])), Err(HostError::UserInfo));
        assert_eq!(check(&hosts(&["a.test/x"])), Err(HostError::Invalid));
        assert_eq!(check(&hosts(&["a test"])), Err(HostError::Invalid));
        assert_eq!(check(&hosts(&["a.test?x"])), Err(HostError::Invalid));
        assert_eq!(check(&hosts(&["a.test#x"])), Err(HostError::Invalid));
    }
}
