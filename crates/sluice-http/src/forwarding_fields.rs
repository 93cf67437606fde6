//! The forwarding fields the proxy writes for its upstream.
//!
//! An upstream behind Sluice learns who the client is, and which host and
//! path it asked for, from fields a proxy writes. A client that speaks to
//! Sluice directly must not write them itself: an upstream that trusts its
//! proxy would believe a client's `X-Forwarded-For`, route by its
//! `X-Forwarded-Host`, or serve the path its `X-Original-URL` names, none
//! of which Sluice limited. So, for the upstream:
//!
//! - from a peer that is not a trusted proxy, every such field the client
//!   wrote is removed, and Sluice writes `X-Forwarded-For` (the peer),
//!   `X-Forwarded-Proto` (`http`) and `X-Forwarded-Host` (the request's
//!   host);
//! - from a trusted proxy, its fields are kept, and the peer is appended
//!   to `X-Forwarded-For`, as each proxy on the way does.

use std::net::IpAddr;
use std::sync::LazyLock;

use http::header::{FORWARDED, HOST};
use http::{HeaderMap, HeaderName, HeaderValue};

use crate::name_set::NameSet;

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Fields that name the client, or the host, scheme, port or path it asked
/// for, which only a proxy may write. Names, not text: a map looks a name
/// up as it is, where text is parsed into a name at every call.
static PROXY_WRITTEN: LazyLock<NameSet> = LazyLock::new(|| {
    NameSet::new([
        FORWARDED,
        X_FORWARDED_FOR,
        HeaderName::from_static("x-real-ip"),
        X_FORWARDED_HOST,
        X_FORWARDED_PROTO,
        HeaderName::from_static("x-forwarded-port"),
        HeaderName::from_static("x-forwarded-prefix"),
        HeaderName::from_static("x-original-url"),
        HeaderName::from_static("x-rewrite-url"),
    ])
});

/// Writes the forwarding fields for a request from `peer` (`trusted`: a
/// trusted proxy) into `headers`, the request the upstream gets.
pub fn write(headers: &mut HeaderMap, peer: IpAddr, trusted: bool) {
    // Written on the stack, not through `core::fmt` (a fifth of this
    // function's cost, on every proxied request).
    let peer_text = sluice_policy::key_text::IpText::new(peer);
    if trusted {
        let chain: Vec<&str> = headers
            .get_all(&X_FORWARDED_FOR)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let joined = if chain.is_empty() {
            peer_text.as_str().to_owned()
        } else {
            format!("{}, {}", chain.join(", "), peer_text.as_str())
        };
        if let Ok(v) = HeaderValue::from_str(&joined) {
            headers.insert(X_FORWARDED_FOR, v);
        }
        return;
    }
    PROXY_WRITTEN.remove_from(headers);
    if let Ok(v) = HeaderValue::from_bytes(peer_text.as_bytes()) {
        headers.insert(X_FORWARDED_FOR, v);
    }
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static("http"));
    if let Some(host) = headers.get(HOST).cloned() {
        headers.insert(X_FORWARDED_HOST, host);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_clients_own_fields_are_replaced_by_sluices() {
        let mut h = fields(&[
            ("host", "api.test"),
            ("x-forwarded-for", "6.6.6.6"),
            ("forwarded", "for=6.6.6.6;host=admin.test"),
            ("x-forwarded-host", "admin.test"),
            ("x-original-url", "/admin/export"),
            ("x-real-ip", "6.6.6.6"),
        ]);
        write(&mut h, "192.0.2.7".parse().unwrap(), false);
        assert_eq!(h["x-forwarded-for"], "192.0.2.7");
        assert_eq!(h["x-forwarded-host"], "api.test");
        assert_eq!(h["x-forwarded-proto"], "http");
        for gone in ["forwarded", "x-original-url", "x-real-ip"] {
            assert!(!h.contains_key(gone), "{gone}");
        }
    }

    #[test]
    fn a_trusted_proxys_chain_is_extended() {
        let mut h = fields(&[
            ("x-forwarded-for", "198.51.100.7"),
            ("x-forwarded-for", "10.0.0.2"),
            ("x-forwarded-host", "api.test"),
        ]);
        write(&mut h, "10.0.0.1".parse().unwrap(), true);
        assert_eq!(h["x-forwarded-for"], "198.51.100.7, 10.0.0.2, 10.0.0.1");
        assert_eq!(h["x-forwarded-host"], "api.test");
    }
}
