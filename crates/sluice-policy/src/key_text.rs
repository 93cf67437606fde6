//! A client key as text, without allocating: borrowed from the request, or a
//! client IP written into an inline buffer.
//!
//! The key of an `ip` limit is the address's usual text form (`192.0.2.1`,
//! `2001:db8::1`), exactly as `IpAddr`'s `Display` writes it, so keys files,
//! allow lists and stored key hashes mean the same as they always did. It is
//! written on every request under such a limit, so IPv4 (the common case) is
//! written digit by digit rather than through `core::fmt`.

use std::fmt;
use std::net::IpAddr;
use std::ops::Deref;

use ipnet::IpNet;
use sluice_store::{KeyHasher, KeyId};

/// The longest text form of an IP address or network: a full IPv6 address
/// with an embedded IPv4 (`ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255`),
/// or an IPv6 network (at most 39 bytes of address and `/127`).
const IP_TEXT_MAX: usize = 45;

/// A client key's text: what a limit counts a request under (raw; stores
/// hash it before it goes anywhere).
#[derive(Clone)]
pub enum KeyText<'a> {
    /// Borrowed from the request (a header's value) or a constant.
    Borrowed(&'a str),
    /// A client IP, written inline.
    Ip(IpText),
}

impl<'a> KeyText<'a> {
    /// The key of a client IP.
    #[inline]
    pub fn ip(ip: IpAddr) -> Self {
        Self::Ip(IpText::new(ip))
    }

    /// The key of a client network (see
    /// [`client_network`](crate::client_ip::client_network)): an IPv4
    /// address's text, or an IPv6 network's (`2001:db8:1:2::/64`; a /128
    /// is its address alone).
    pub fn net(net: IpNet) -> Self {
        let mut text = IpText::new(net.addr());
        if let IpNet::V6(v6) = net
            && v6.prefix_len() < 128
        {
            let _ = fmt::write(&mut text, format_args!("/{}", v6.prefix_len()));
        }
        Self::Ip(text)
    }
}

impl KeyText<'_> {
    /// The key's keyed hash: an IPv4 address's from its bytes (the same as
    /// from its text: [`KeyHasher::key_id_v4`]).
    #[inline]
    pub fn id(&self, hasher: &KeyHasher) -> KeyId {
        match self {
            Self::Ip(ip @ IpText { v4: Some(v4), .. }) => hasher.key_id_v4(*v4, || ip.as_bytes()),
            _ => hasher.key_id_bytes(self.as_bytes()),
        }
    }

    /// The text's bytes (what a key's hash is made from), without the
    /// UTF-8 check that `&str` would need for an IP's buffer.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            Self::Borrowed(s) => s.as_bytes(),
            Self::Ip(ip) => ip.as_bytes(),
        }
    }
}

impl Deref for KeyText<'_> {
    type Target = str;

    fn deref(&self) -> &str {
        match self {
            Self::Borrowed(s) => s,
            Self::Ip(ip) => ip.as_str(),
        }
    }
}

impl PartialEq for KeyText<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for KeyText<'_> {}

impl PartialEq<str> for KeyText<'_> {
    fn eq(&self, other: &str) -> bool {
        &**self == other
    }
}

impl fmt::Debug for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

impl fmt::Display for KeyText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self)
    }
}

/// Each octet's decimal digits followed by a dot, and how many digits.
const OCTETS: [([u8; 4], u8); 256] = {
    let mut table = [([0u8; 4], 0u8); 256];
    let mut i = 0;
    while i < 256 {
        let o = i as u8;
        table[i] = if o >= 100 {
            ([b'0' + o / 100, b'0' + o / 10 % 10, b'0' + o % 10, b'.'], 3)
        } else if o >= 10 {
            ([b'0' + o / 10, b'0' + o % 10, b'.', 0], 2)
        } else {
            ([b'0' + o, b'.', 0, 0], 1)
        };
        i += 1;
    }
    table
};

/// An IP address's text form in a fixed buffer.
#[derive(Clone, Copy)]
pub struct IpText {
    buf: [u8; IP_TEXT_MAX],
    len: u8,
    /// The address, when the text is an IPv4 address's (and nothing more).
    v4: Option<std::net::Ipv4Addr>,
}

impl IpText {
    /// Writes `ip` as `IpAddr`'s `Display` does.
    #[inline]
    pub fn new(ip: IpAddr) -> Self {
        let mut text = Self {
            buf: [0; IP_TEXT_MAX],
            len: 0,
            v4: None,
        };
        match ip {
            IpAddr::V4(v4) => {
                text.v4 = Some(v4);
                // At most 15 bytes: `255.255.255.255`. Each octet's digits
                // come from a table, written four bytes at a time (the
                // fourth is the dot, or is overwritten).
                let mut n = 0;
                for octet in v4.octets() {
                    let (digits, len) = OCTETS[usize::from(octet)];
                    text.buf[n..n + 4].copy_from_slice(&digits);
                    n += usize::from(len) + 1;
                }
                text.len = (n - 1) as u8;
            }
            // Rare enough on the hot path to go through `core::fmt`, which
            // knows IPv6's compression rules; it cannot overflow the buffer.
            IpAddr::V6(v6) => {
                let _ = fmt::write(&mut text, format_args!("{v6}"));
            }
        }
        text
    }

    /// The text's bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        // Only ASCII is ever written.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }
}

impl AsRef<[u8]> for IpText {
    fn as_ref(&self) -> &[u8] {
        self.as_bytes()
    }
}

impl fmt::Write for IpText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let start = usize::from(self.len);
        let end = start + s.len();
        let slot = self.buf.get_mut(start..end).ok_or(fmt::Error)?;
        slot.copy_from_slice(s.as_bytes());
        // No longer an address alone.
        self.v4 = None;
        self.len = u8::try_from(end).map_err(|_| fmt::Error)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    #[test]
    fn the_longest_forms_fit() {
        for ip in [
            IpAddr::V4(Ipv4Addr::new(255, 255, 255, 255)),
            IpAddr::V4(Ipv4Addr::new(0, 0, 0, 0)),
            IpAddr::V6(Ipv6Addr::new(
                0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff, 0xffff,
            )),
            IpAddr::V6("::ffff:255.255.255.255".parse().unwrap()),
            IpAddr::V6(
                "1111:2222:3333:4444:5555:6666:255.255.255.255"
                    .parse()
                    .unwrap(),
            ),
        ] {
            assert_eq!(&*KeyText::ip(ip), ip.to_string());
        }
    }

    #[test]
    fn a_network_key_is_its_address_and_prefix() {
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(&*KeyText::net(net("192.0.2.1/32")), "192.0.2.1");
        assert_eq!(&*KeyText::net(net("2001:db8::/64")), "2001:db8::/64");
        assert_eq!(&*KeyText::net(net("2001:db8::1/128")), "2001:db8::1");
        assert_eq!(
            &*KeyText::net(net("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127")),
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe/127"
        );
    }

    proptest! {
        #[test]
        fn ipv4_text_is_display(bits: u32) {
            let ip = IpAddr::V4(Ipv4Addr::from(bits));
            prop_assert_eq!(&*KeyText::ip(ip), ip.to_string());
            // Its id is its text's, whichever way the hasher makes it.
            for h in [KeyHasher::random(), KeyHasher::from_secret(b"s")] {
                prop_assert_eq!(KeyText::ip(ip).id(&h), h.key_id(&ip.to_string()));
                let net = KeyText::net(IpNet::from(ip));
                prop_assert_eq!(net.id(&h), h.key_id(&ip.to_string()));
            }
        }

        #[test]
        fn ipv6_text_is_display(
            // Half the groups zero, for the runs IPv6's compression elides.
            groups in proptest::array::uniform8(prop_oneof![Just(0u16), any::<u16>()])
        ) {
            let ip = IpAddr::V6(Ipv6Addr::from(groups));
            prop_assert_eq!(&*KeyText::ip(ip), ip.to_string());
        }
    }
}
