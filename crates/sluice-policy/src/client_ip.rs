//! The client's IP address, believing forwarding headers only from trusted
//! proxies.
//!
//! The client is the socket peer, unless the peer is a configured trusted
//! proxy. Then the forwarding headers are read as chains of hops (see
//! [`forwarded`](crate::forwarded)), all by one rule: from the right, each
//! hop appended by a trusted proxy is skipped, and the first untrusted
//! address is the client. Anything left of it was written by the client
//! itself and is ignored, so a client cannot choose its own address. A hop
//! that names no address (`unknown`, an obfuscated identifier) ends the
//! walk: the client is then the trusted proxy that wrote it.
//!
//! Which headers are read: the one `client.forwarded_header` names, when it
//! names one. Otherwise every forwarding header present, and they must
//! agree: a trusted proxy that writes only `Forwarded` passes on an
//! `X-Forwarded-For` the client wrote itself, so two headers that name
//! different clients are [`AmbiguousClient`], never a choice the client
//! makes.
//!
//! A client is identified by its *network*: an IPv4 address, or the
//! `/ipv6_prefix` network of an IPv6 address (a /64 by default, since one
//! subscriber usually holds a whole /64 and could otherwise take a fresh
//! address, and a fresh bucket, for every request). An IPv4-mapped IPv6
//! address (`::ffff:192.0.2.1`) is the IPv4 client it maps.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

use crate::forwarded::{ForwardedHeader, Hop, canonical};

/// The IPv6 prefix that identifies a client unless configured otherwise.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// A request from a trusted proxy whose forwarding headers name different
/// clients, with no `client.forwarded_header` to say which one the proxy
/// wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "the request's forwarding headers name different clients; set client.forwarded_header to the one header the proxy writes"
)]
pub struct AmbiguousClient;

/// Finds client addresses behind a set of trusted proxies.
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    ipv6_prefix: u8,
    header: Option<ForwardedHeader>,
}

impl Default for TrustedProxies {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// The network that identifies a client at `ip`: the address itself for
/// IPv4, its `/ipv6_prefix` network for IPv6 (mapped IPv4 is IPv4).
pub fn client_network(ip: IpAddr, ipv6_prefix: u8) -> IpNet {
    match canonical(ip) {
        IpAddr::V4(v4) => IpNet::V4(ipnet::Ipv4Net::from(v4)),
        IpAddr::V6(v6) => ipnet::Ipv6Net::new(v6, ipv6_prefix.min(128))
            .map_or(IpNet::V6(ipnet::Ipv6Net::from(v6)), |n| {
                IpNet::V6(n.trunc())
            }),
    }
}

impl TrustedProxies {
    /// Trusts the given networks; IPv6 clients are told apart by their /64,
    /// and every forwarding header present is read.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self {
            nets,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            header: None,
        }
    }

    /// Tells IPv6 clients apart by their `/prefix` network instead (128:
    /// each address is a client).
    pub fn with_ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix.min(128);
        self
    }

    /// Reads only `header`, the one the trusted proxies write; the others
    /// are the client's and ignored.
    pub fn with_header(mut self, header: ForwardedHeader) -> Self {
        self.header = Some(header);
        self
    }

    /// The network that identifies the client of a request from `peer`.
    pub fn client_net(&self, peer: IpAddr, headers: &HeaderMap) -> Result<IpNet, AmbiguousClient> {
        Ok(client_network(
            self.client_ip(peer, headers)?,
            self.ipv6_prefix,
        ))
    }

    /// The network that identifies a client at `ip` (no headers read).
    pub fn network_of(&self, ip: IpAddr) -> IpNet {
        client_network(ip, self.ipv6_prefix)
    }

    /// Whether no proxy is trusted: every client is its peer.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.nets.iter().any(|n| n.contains(&ip))
    }

    /// The client address of a request that arrived from `peer`.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> Result<IpAddr, AmbiguousClient> {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return Ok(peer);
        }
        if let Some(header) = self.header {
            return Ok(self.walk(peer, header, headers));
        }
        let mut found: Option<IpAddr> = None;
        for header in ForwardedHeader::ALL {
            if !headers.contains_key(header.name()) {
                continue;
            }
            let client = self.walk(peer, header, headers);
            match found {
                Some(other) if other != client => return Err(AmbiguousClient),
                _ => found = Some(client),
            }
        }
        Ok(found.unwrap_or(peer))
    }

    /// The client `header` names for a request from the trusted `peer`: its
    /// chain walked from the right past trusted hops.
    fn walk(&self, peer: IpAddr, header: ForwardedHeader, headers: &HeaderMap) -> IpAddr {
        let mut client = peer;
        for hop in header.hops(headers).into_iter().rev() {
            let Hop::Addr(ip) = hop else {
                break;
            };
            client = ip;
            if !self.trusts(ip) {
                break;
            }
        }
        client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, v.parse().unwrap());
        }
        h
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let t = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "1.1.1.1")]);
        assert_eq!(
            t.client_ip(ip("203.0.113.9"), &h).unwrap(),
            ip("203.0.113.9")
        );
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        // The client forged 6.6.6.6; 198.51.100.7 connected to our proxy 10.0.0.2.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
        assert_eq!(t.client_ip(ip("10.0.0.1"), &h).unwrap(), ip("198.51.100.7"));
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8::1]:4711\"",
        )]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h).unwrap(), ip("2001:db8::1"));
    }

    #[test]
    fn garbage_stops_the_walk() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "5.5.5.5, not-an-ip, 127.0.0.5")]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h).unwrap(), ip("127.0.0.5"));
    }

    #[test]
    fn an_ipv6_client_is_its_prefix() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "2001:db8:1:2:aaaa::1")]);
        let net = t.client_net(ip("127.0.0.1"), &h).unwrap();
        assert_eq!(net.to_string(), "2001:db8:1:2::/64");
        for other in ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"] {
            assert_eq!(t.network_of(ip(other)), net);
        }
        assert_ne!(t.network_of(ip("2001:db8:1:3::1")), net);
        let exact = t.clone().with_ipv6_prefix(128);
        assert_eq!(
            exact.client_net(ip("127.0.0.1"), &h).unwrap().to_string(),
            "2001:db8:1:2:aaaa::1/128"
        );
        assert_eq!(
            t.network_of(ip("::ffff:192.0.2.1")).to_string(),
            "192.0.2.1/32"
        );
    }

    #[test]
    fn mapped_ipv4_is_ipv4() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "192.0.2.1")]);
        assert_eq!(
            t.client_ip(ip("::ffff:127.0.0.1"), &h).unwrap(),
            ip("192.0.2.1")
        );
    }

    #[test]
    fn forwarded_and_x_forwarded_for_naming_different_clients_are_ambiguous() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        // The proxy wrote Forwarded; the client wrote X-Forwarded-For.
        let h = headers(&[
            ("forwarded", "for=198.51.100.7"),
            ("x-forwarded-for", "203.0.113.66"),
        ]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), Err(AmbiguousClient));
        // Named, the one header is read and the other ignored.
        let named = t.clone().with_header(ForwardedHeader::Forwarded);
        assert_eq!(named.client_ip(ip("127.0.0.1"), &h), Ok(ip("198.51.100.7")));
        let xff = t.clone().with_header(ForwardedHeader::XForwardedFor);
        assert_eq!(xff.client_ip(ip("127.0.0.1"), &h), Ok(ip("203.0.113.66")));
        // Headers that agree are one client.
        let h = headers(&[
            ("forwarded", "for=\"198.51.100.7:1234\""),
            ("x-forwarded-for", "198.51.100.7"),
            ("x-real-ip", "198.51.100.7"),
        ]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), Ok(ip("198.51.100.7")));
        // An untrusted peer's headers are never read, however they disagree.
        assert_eq!(
            t.client_ip(
                ip("192.0.2.1"),
                &headers(&[("forwarded", "for=1.1.1.1"), ("x-real-ip", "2.2.2.2")])
            ),
            Ok(ip("192.0.2.1"))
        );
    }

    #[test]
    fn an_unknown_or_obfuscated_hop_is_the_proxy_that_wrote_it() {
        let t = TrustedProxies::new(vec![
            "127.0.0.0/8".parse().unwrap(),
            "10.0.0.0/8".parse().unwrap(),
        ]);
        for value in [
            "for=6.6.6.6, for=unknown, for=10.0.0.3",
            "for=6.6.6.6, for=_hidden, for=10.0.0.3",
        ] {
            let h = headers(&[("forwarded", value)]);
            assert_eq!(
                t.client_ip(ip("127.0.0.1"), &h),
                Ok(ip("10.0.0.3")),
                "{value}"
            );
        }
        let h = headers(&[("forwarded", "for=unknown")]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), Ok(ip("127.0.0.1")));
    }

    #[test]
    fn x_real_ip_follows_the_same_rule() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()])
            .with_header(ForwardedHeader::XRealIp);
        let h = headers(&[("x-real-ip", "203.0.113.5"), ("x-forwarded-for", "6.6.6.6")]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), Ok(ip("203.0.113.5")));
    }
}
