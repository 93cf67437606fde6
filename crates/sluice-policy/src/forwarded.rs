//! The forwarding headers a proxy writes, read as chains of hops.
//!
//! Three headers name the client of a proxied request:
//!
//! - `X-Forwarded-For: client, proxy1, proxy2`: each proxy appends the
//!   address it got the request from;
//! - `Forwarded: for=client, for="[2001:db8::1]:4711";proto=https`
//!   (RFC 7239): the same chain, one element a hop, with parameters;
//! - `X-Real-IP: client`: the address the (last) proxy got the request from.
//!
//! Each is read here as the same thing: a chain of [`Hop`]s, leftmost
//! first, which [`TrustedProxies`](crate::client_ip::TrustedProxies) walks
//! from the right. A hop that names no address (RFC 7239's `unknown`, an
//! obfuscated identifier such as `_hidden`, an element without `for=`, or
//! text that is not an address) is [`Hop::Opaque`]: the walk stops there.

use std::net::{IpAddr, Ipv4Addr};

use http::HeaderMap;
use serde::Deserialize;
use smallvec::SmallVec;

/// A forwarding header a trusted proxy writes (`client.forwarded_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For`.
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// RFC 7239 `Forwarded`.
    #[serde(rename = "forwarded")]
    Forwarded,
    /// `X-Real-IP`.
    #[serde(rename = "x-real-ip")]
    XRealIp,
}

impl ForwardedHeader {
    /// Every forwarding header, in the order they are read.
    pub const ALL: [Self; 3] = [Self::XForwardedFor, Self::Forwarded, Self::XRealIp];

    /// The field's name, lower case.
    pub fn name(self) -> &'static str {
        match self {
            Self::XForwardedFor => "x-forwarded-for",
            Self::Forwarded => "forwarded",
            Self::XRealIp => "x-real-ip",
        }
    }

    /// The hops this field names in `headers`, leftmost first (every field
    /// line of it, in order); empty when the field is absent.
    pub fn hops(self, headers: &HeaderMap) -> Hops {
        let mut hops = Hops::new();
        for value in headers.get_all(self.name()) {
            let Ok(text) = value.to_str() else {
                hops.push(Hop::Opaque);
                continue;
            };
            match self {
                Self::XForwardedFor | Self::XRealIp => {
                    hops.extend(text.split(',').map(|s| node(s.trim())));
                }
                Self::Forwarded => forwarded_hops(text, &mut hops),
            }
        }
        hops
    }
}

/// One hop of a forwarding chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// An address (an IPv4-mapped IPv6 address is its IPv4 address).
    Addr(IpAddr),
    /// No address: `unknown`, an obfuscated identifier, a missing `for=`,
    /// or text that is not an address.
    Opaque,
}

/// A chain of hops; short chains are kept inline.
pub type Hops = SmallVec<[Hop; 4]>;

/// The hops of one `Forwarded` field value: its elements, separated by
/// commas outside quoted strings, each the node of its `for` parameter.
fn forwarded_hops(text: &str, hops: &mut Hops) {
    for element in split_unquoted(text, b',') {
        let mut for_node = None;
        for pair in split_unquoted(element, b';') {
            let Some((name, value)) = pair.split_once('=') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("for") && for_node.is_none() {
                for_node = Some(node(&unquote(value.trim())));
            }
        }
        hops.push(for_node.unwrap_or(Hop::Opaque));
    }
}

/// `text` split at `sep` wherever it is not inside a quoted string (with
/// `\` escapes, RFC 9110 §5.6.4).
fn split_unquoted(text: &str, sep: u8) -> impl Iterator<Item = &str> {
    let bytes = text.as_bytes();
    let mut start = 0;
    let mut quoted = false;
    let mut escaped = false;
    let mut cuts = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        if escaped {
            escaped = false;
        } else if quoted && b == b'\\' {
            escaped = true;
        } else if b == b'"' {
            quoted = !quoted;
        } else if b == sep && !quoted {
            cuts.push((start, i));
            start = i + 1;
        }
    }
    cuts.push((start, bytes.len()));
    // Cuts fall on ASCII bytes, so each piece is a str.
    cuts.into_iter().filter_map(move |(a, b)| text.get(a..b))
}

/// A parameter value without its quotes and escapes.
fn unquote(value: &str) -> String {
    let Some(inner) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) else {
        return value.to_owned();
    };
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        out.push(if c == '\\' {
            chars.next().unwrap_or(c)
        } else {
            c
        });
    }
    out
}

/// A node (RFC 7239 §6): `192.0.2.1`, `192.0.2.1:80`, `[2001:db8::1]`,
/// `[2001:db8::1]:80` (a port may be obfuscated, `_abc`), and a bare IPv6
/// address as `X-Forwarded-For` writes it. `unknown`, obfuscated
/// identifiers (`_hidden`) and anything else are opaque.
pub fn node(text: &str) -> Hop {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Hop::Addr(canonical(ip));
    }
    if let Some(rest) = text.strip_prefix('[') {
        let Some((inside, after)) = rest.split_once(']') else {
            return Hop::Opaque;
        };
        let port_ok = after.is_empty() || after.strip_prefix(':').is_some_and(port_ok);
        return match (inside.parse::<std::net::Ipv6Addr>(), port_ok) {
            (Ok(v6), true) => Hop::Addr(canonical(IpAddr::V6(v6))),
            _ => Hop::Opaque,
        };
    }
    match text.rsplit_once(':') {
        Some((host, port)) => match host.parse::<Ipv4Addr>() {
            Ok(v4) if port_ok(port) => Hop::Addr(IpAddr::V4(v4)),
            _ => Hop::Opaque,
        },
        None => Hop::Opaque,
    }
}

/// Whether a node's port is digits or an obfuscated port (`_` and
/// token characters).
fn port_ok(port: &str) -> bool {
    if let Some(obfuscated) = port.strip_prefix('_') {
        return !obfuscated.is_empty()
            && obfuscated
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    }
    !port.is_empty() && port.len() <= 5 && port.parse::<u16>().is_ok()
}

/// IPv4-mapped IPv6 addresses are their IPv4 address.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Hop {
        Hop::Addr(s.parse().unwrap())
    }

    fn hops(header: ForwardedHeader, values: &[&str]) -> Vec<Hop> {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header.name(), v.parse().unwrap());
        }
        header.hops(&h).into_vec()
    }

    #[test]
    fn nodes_as_rfc_7239_writes_them() {
        assert_eq!(node("192.0.2.43"), ip("192.0.2.43"));
        assert_eq!(node("192.0.2.43:47011"), ip("192.0.2.43"));
        assert_eq!(node("192.0.2.43:_port1"), ip("192.0.2.43"));
        assert_eq!(node("[2001:db8:cafe::17]"), ip("2001:db8:cafe::17"));
        assert_eq!(node("[2001:db8:cafe::17]:4711"), ip("2001:db8:cafe::17"));
        assert_eq!(node("2001:db8:cafe::17"), ip("2001:db8:cafe::17"));
        assert_eq!(node("::ffff:192.0.2.1"), ip("192.0.2.1"));
        for opaque in [
            "unknown",
            "UNKNOWN",
            "_hidden",
            "_SEVKISEK",
            "",
            "example.com",
            "[2001:db8::1",
            "[2001:db8::1]x",
            "[192.0.2.1]",
            "192.0.2.1:",
            "192.0.2.1:99999",
            "192.0.2.1:_",
            "2001:db8::1:80:80:80:80:80",
        ] {
            assert_eq!(node(opaque), Hop::Opaque, "{opaque}");
        }
    }

    #[test]
    fn forwarded_elements_each_name_one_hop() {
        let got = hops(
            ForwardedHeader::Forwarded,
            &[
                "for=192.0.2.60;proto=http;by=203.0.113.43",
                "For=\"[2001:db8:cafe::17]:4711\", for=unknown, proto=https, for=_gazonk",
            ],
        );
        assert_eq!(
            got,
            vec![
                ip("192.0.2.60"),
                ip("2001:db8:cafe::17"),
                Hop::Opaque,
                Hop::Opaque,
                Hop::Opaque
            ]
        );
    }

    #[test]
    fn commas_and_semicolons_inside_quotes_split_nothing() {
        let got = hops(
            ForwardedHeader::Forwarded,
            &["for=\"198.51.100.1\";ext=\"a,b;c\\\"d\", for=192.0.2.9"],
        );
        assert_eq!(got, vec![ip("198.51.100.1"), ip("192.0.2.9")]);
    }

    #[test]
    fn x_forwarded_for_and_x_real_ip_are_comma_lists() {
        let got = hops(
            ForwardedHeader::XForwardedFor,
            &["6.6.6.6, 198.51.100.7", "10.0.0.2 , not-an-ip"],
        );
        assert_eq!(
            got,
            vec![
                ip("6.6.6.6"),
                ip("198.51.100.7"),
                ip("10.0.0.2"),
                Hop::Opaque
            ]
        );
        assert_eq!(
            hops(ForwardedHeader::XRealIp, &["203.0.113.5"]),
            vec![ip("203.0.113.5")]
        );
        assert!(hops(ForwardedHeader::XRealIp, &[]).is_empty());
    }
}
