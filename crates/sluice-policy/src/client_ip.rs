//! The client's IP address, believing forwarding headers only from trusted
//! proxies.
//!
//! The client is the socket peer, unless the peer is a configured trusted
//! proxy. Then `X-Forwarded-For` (or, failing that, `Forwarded`) is read from
//! the right: each hop appended by a trusted proxy is skipped, and the first
//! untrusted address is the client. Anything left of it was written by the
//! client itself and is ignored, so a client cannot choose its own address.
//!
//! A client is identified by its *network*: an IPv4 address, or the
//! `/ipv6_prefix` network of an IPv6 address (a /64 by default, since one
//! subscriber usually holds a whole /64 and could otherwise take a fresh
//! address, and a fresh bucket, for every request). An IPv4-mapped IPv6
//! address (`::ffff:192.0.2.1`) is the IPv4 client it maps.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// The IPv6 prefix that identifies a client unless configured otherwise.
pub const DEFAULT_IPV6_PREFIX: u8 = 64;

/// Finds client addresses behind a set of trusted proxies.
#[derive(Debug, Clone)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
    ipv6_prefix: u8,
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
    /// Trusts the given networks; IPv6 clients are told apart by their /64.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self {
            nets,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
        }
    }

    /// Tells IPv6 clients apart by their `/prefix` network instead (128:
    /// each address is a client).
    pub fn with_ipv6_prefix(mut self, prefix: u8) -> Self {
        self.ipv6_prefix = prefix.min(128);
        self
    }

    /// The network that identifies the client of a request from `peer`.
    pub fn client_net(&self, peer: IpAddr, headers: &HeaderMap) -> IpNet {
        client_network(self.client_ip(peer, headers), self.ipv6_prefix)
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
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical(peer);
        if !self.trusts(peer) {
            return peer;
        }
        let mut hops = forwarded_for(headers);
        let mut client = peer;
        while let Some(hop) = hops.pop() {
            client = hop;
            if !self.trusts(hop) {
                break;
            }
        }
        client
    }
}

/// IPv4-mapped IPv6 addresses are their IPv4 address.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The forwarding chain, leftmost first. Unparseable entries end the chain
/// at that point (everything left of them is untrustworthy anyway).
fn forwarded_for(headers: &HeaderMap) -> Vec<IpAddr> {
    let xff: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .collect();
    let raw: Vec<String> = if xff.is_empty() {
        headers
            .get_all("forwarded")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|elem| {
                elem.split(';').find_map(|pair| {
                    let (k, v) = pair.trim().split_once('=')?;
                    k.trim()
                        .eq_ignore_ascii_case("for")
                        .then(|| v.trim().trim_matches('"').to_owned())
                })
            })
            .collect()
    } else {
        xff.into_iter().map(str::to_owned).collect()
    };
    let mut out = Vec::with_capacity(raw.len());
    // Keep the rightmost run of parseable addresses.
    for entry in raw.iter().rev() {
        match parse_hop(entry) {
            Some(ip) => out.push(canonical(ip)),
            None => break,
        }
    }
    out.reverse();
    out
}

/// `1.2.3.4`, `1.2.3.4:567`, `[::1]`, `[::1]:567` or `::1`.
fn parse_hop(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse() {
        return Some(ip);
    }
    if let Some(rest) = s.strip_prefix('[') {
        return rest.split(']').next()?.parse().ok();
    }
    s.rsplit_once(':')?.0.parse().ok()
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
        assert_eq!(t.client_ip(ip("203.0.113.9"), &h), ip("203.0.113.9"));
    }

    #[test]
    fn the_rightmost_untrusted_hop_is_the_client() {
        let t = TrustedProxies::new(vec!["10.0.0.0/8".parse().unwrap()]);
        // The client forged 6.6.6.6; 198.51.100.7 connected to our proxy 10.0.0.2.
        let h = headers(&[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.2")]);
        assert_eq!(t.client_ip(ip("10.0.0.1"), &h), ip("198.51.100.7"));
    }

    #[test]
    fn forwarded_is_read_when_there_is_no_x_forwarded_for() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[(
            "forwarded",
            "for=192.0.2.60;proto=http, for=\"[2001:db8::1]:4711\"",
        )]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), ip("2001:db8::1"));
    }

    #[test]
    fn garbage_stops_the_walk() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "5.5.5.5, not-an-ip, 127.0.0.5")]);
        assert_eq!(t.client_ip(ip("127.0.0.1"), &h), ip("127.0.0.5"));
    }

    #[test]
    fn an_ipv6_client_is_its_prefix() {
        let t = TrustedProxies::new(vec!["127.0.0.0/8".parse().unwrap()]);
        let h = headers(&[("x-forwarded-for", "2001:db8:1:2:aaaa::1")]);
        let net = t.client_net(ip("127.0.0.1"), &h);
        assert_eq!(net.to_string(), "2001:db8:1:2::/64");
        for other in ["2001:db8:1:2::1", "2001:db8:1:2:ffff:ffff:ffff:ffff"] {
            assert_eq!(t.network_of(ip(other)), net);
        }
        assert_ne!(t.network_of(ip("2001:db8:1:3::1")), net);
        let exact = t.clone().with_ipv6_prefix(128);
        assert_eq!(
            exact.client_net(ip("127.0.0.1"), &h).to_string(),
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
        assert_eq!(t.client_ip(ip("::ffff:127.0.0.1"), &h), ip("192.0.2.1"));
    }
}
