//! The PROXY protocol's header (HAProxy's `proxy-protocol.txt`, versions 1
//! and 2): what a layer-4 load balancer sends first on a connection, so
//! that the server learns the client's address.
//!
//! - **v1** is one line of text, at most [`V1_MAX`] bytes with its CRLF:
//!   `PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n` (or `TCP6` with
//!   IPv6 addresses, or `UNKNOWN` and anything up to the CRLF).
//! - **v2** is binary: the 12-byte [`V2_SIGNATURE`], a version and command
//!   byte (`0x21` PROXY, `0x20` LOCAL), an address family and transport
//!   byte, a big-endian length, then that many bytes of addresses and
//!   TLVs. Sluice reads at most [`V2_MAX`] bytes of it.
//!
//! A header that names an IPv4 or IPv6 source gives [`Header::Proxied`];
//! one that names none (v1 `UNKNOWN`, v2 `LOCAL`, a v2 `UNSPEC` or `UNIX`
//! family) gives [`Header::Local`]: the connection keeps its real peer, as
//! the spec says. [`parse`] reads from the first byte of a connection and
//! says how long the header is, or that more bytes are needed; it never
//! reads past [`V2_MAX`] bytes, and never panics.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The first 12 bytes of a v2 header.
pub const V2_SIGNATURE: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";
/// The longest v1 header, its CRLF included (the spec's bound).
pub const V1_MAX: usize = 107;
/// The longest v2 header Sluice accepts: its 16 fixed bytes, and up to
/// 4 KiB of addresses and TLVs (addresses take at most 216; the TLVs
/// balancers send, such as AWS's endpoint ID, are far shorter).
pub const V2_MAX: usize = 16 + 4096;

/// What a complete header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    /// The connection was relayed for a client at this address.
    Proxied(SocketAddr),
    /// The header names no client (a balancer's own connection, such as a
    /// health check): the connection's real peer stands.
    Local,
}

/// [`parse`]'s answer on the bytes read so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parsed {
    /// The bytes so far begin a header but do not complete it.
    Incomplete,
    /// A whole header, `len` bytes long; what follows belongs to the
    /// protocol it carries.
    Complete {
        /// What it says.
        header: Header,
        /// Its length in bytes.
        len: usize,
    },
}

/// Why the bytes cannot begin a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Neither `PROXY ` nor the v2 signature.
    #[error("the connection does not start with a PROXY protocol header")]
    NotProxy,
    /// A v1 line with no CRLF within [`V1_MAX`] bytes.
    #[error("a PROXY protocol v1 line longer than {V1_MAX} bytes")]
    V1TooLong,
    /// A v1 line that does not follow the grammar.
    #[error("a malformed PROXY protocol v1 line: {0}")]
    V1Malformed(&'static str),
    /// A v2 header whose length field is over [`V2_MAX`].
    #[error("a PROXY protocol v2 header of {0} bytes (at most {V2_MAX} are read)")]
    V2TooLong(usize),
    /// A v2 header that is not version 2, or names an unknown command,
    /// family or transport, or is too short for its addresses.
    #[error("a malformed PROXY protocol v2 header: {0}")]
    V2Malformed(&'static str),
}

/// Reads a header from the first bytes of a connection, `buf`.
pub fn parse(buf: &[u8]) -> Result<Parsed, HeaderError> {
    match buf.first() {
        None => Ok(Parsed::Incomplete),
        Some(b'P') => parse_v1(buf),
        Some(b'\r') => parse_v2(buf),
        Some(_) => Err(HeaderError::NotProxy),
    }
}

const V1_PREFIX: &[u8] = b"PROXY ";

fn parse_v1(buf: &[u8]) -> Result<Parsed, HeaderError> {
    let start = buf.get(..V1_PREFIX.len().min(buf.len())).unwrap_or(buf);
    if !V1_PREFIX.starts_with(start) {
        return Err(HeaderError::NotProxy);
    }
    let window = buf.get(..V1_MAX.min(buf.len())).unwrap_or(buf);
    let Some(newline) = window.iter().position(|&b| b == b'\n') else {
        return if buf.len() >= V1_MAX {
            Err(HeaderError::V1TooLong)
        } else {
            Ok(Parsed::Incomplete)
        };
    };
    let line = window.get(..newline).unwrap_or_default();
    let Some(line) = line.strip_suffix(b"\r") else {
        return Err(HeaderError::V1Malformed("a line must end with CRLF"));
    };
    let line = std::str::from_utf8(line).map_err(|_| HeaderError::V1Malformed("not ASCII"))?;
    Ok(Parsed::Complete {
        header: v1_fields(line)?,
        len: newline + 1,
    })
}

/// The fields of a v1 line without its CRLF.
fn v1_fields(line: &str) -> Result<Header, HeaderError> {
    let mut fields = line.split(' ');
    fields.next(); // "PROXY", checked by the caller.
    let v6 = match fields.next() {
        // The rest of an UNKNOWN line is ignored, whatever it holds.
        Some("UNKNOWN") => return Ok(Header::Local),
        Some("TCP4") => false,
        Some("TCP6") => true,
        _ => {
            return Err(HeaderError::V1Malformed(
                "the protocol must be TCP4, TCP6 or UNKNOWN",
            ));
        }
    };
    let (Some(source), Some(destination), Some(port), Some(dport), None) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return Err(HeaderError::V1Malformed(
            "TCP4 and TCP6 take two addresses and two ports, one space apart",
        ));
    };
    let (Some(ip), Some(_)) = (v1_address(source, v6), v1_address(destination, v6)) else {
        return Err(HeaderError::V1Malformed(
            "an address is not of the protocol's family",
        ));
    };
    let (Some(port), Some(_)) = (v1_port(port), v1_port(dport)) else {
        return Err(HeaderError::V1Malformed(
            "a port must be a number from 0 to 65535 without leading zeros",
        ));
    };
    Ok(Header::Proxied(SocketAddr::new(ip, port)))
}

/// A v1 address: IPv6 for `TCP6`, IPv4 for `TCP4`.
fn v1_address(text: &str, v6: bool) -> Option<IpAddr> {
    if v6 {
        text.parse::<Ipv6Addr>().ok().map(IpAddr::V6)
    } else {
        text.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
    }
}

/// A v1 port: 0 to 65535 in decimal, without sign or leading zero.
fn v1_port(text: &str) -> Option<u16> {
    let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    let leading_zero = text.len() > 1 && text.starts_with('0');
    if !digits || leading_zero {
        return None;
    }
    text.parse().ok()
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, HeaderError> {
    let seen = buf.len().min(V2_SIGNATURE.len());
    if buf.get(..seen) != V2_SIGNATURE.get(..seen) {
        return Err(HeaderError::NotProxy);
    }
    let (Some(&version_command), Some(&family), Some(length)) = (
        buf.get(12),
        buf.get(13),
        buf.get(14..16).and_then(|b| <[u8; 2]>::try_from(b).ok()),
    ) else {
        return Ok(Parsed::Incomplete);
    };
    if version_command >> 4 != 2 {
        return Err(HeaderError::V2Malformed("the version must be 2"));
    }
    let proxied = match version_command & 0x0f {
        0 => false,
        1 => true,
        _ => {
            return Err(HeaderError::V2Malformed(
                "the command must be LOCAL or PROXY",
            ));
        }
    };
    let len = 16 + usize::from(u16::from_be_bytes(length));
    if len > V2_MAX {
        return Err(HeaderError::V2TooLong(len));
    }
    let Some(block) = buf.get(16..len) else {
        return Ok(Parsed::Incomplete);
    };
    // LOCAL: the block, family included, is discarded.
    if !proxied {
        return Ok(Parsed::Complete {
            header: Header::Local,
            len,
        });
    }
    if family & 0x0f > 2 {
        return Err(HeaderError::V2Malformed(
            "the transport must be UNSPEC, STREAM or DGRAM",
        ));
    }
    let header = match family >> 4 {
        // UNSPEC and UNIX name no IP client: the real peer stands.
        0 | 3 => Header::Local,
        1 => Header::Proxied(v2_source(block, false)?),
        2 => Header::Proxied(v2_source(block, true)?),
        _ => {
            return Err(HeaderError::V2Malformed(
                "the family must be UNSPEC, INET, INET6 or UNIX",
            ));
        }
    };
    Ok(Parsed::Complete { header, len })
}

/// The source of a v2 address block: the source address, the
/// destination's, the source port, the destination's (12 bytes for IPv4,
/// 36 for IPv6), then TLVs.
fn v2_source(block: &[u8], v6: bool) -> Result<SocketAddr, HeaderError> {
    let short = HeaderError::V2Malformed("the length is too short for the addresses");
    let n = if v6 { 16 } else { 4 };
    let ip = if v6 {
        block
            .get(..16)
            .and_then(|b| <[u8; 16]>::try_from(b).ok())
            .map(IpAddr::from)
    } else {
        block
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(IpAddr::from)
    };
    let port = block
        .get(2 * n..2 * n + 2)
        .and_then(|b| <[u8; 2]>::try_from(b).ok())
        .map(u16::from_be_bytes);
    // The destination port must be there too.
    match (ip, port, block.len() >= 2 * n + 4) {
        (Some(ip), Some(port), true) => Ok(SocketAddr::new(ip, port)),
        _ => Err(short),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v2 header: signature, `version_command`, `family`, then `block`.
    fn v2(version_command: u8, family: u8, block: &[u8]) -> Vec<u8> {
        let mut h = V2_SIGNATURE.to_vec();
        h.push(version_command);
        h.push(family);
        h.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
        h.extend_from_slice(block);
        h
    }

    fn complete(buf: &[u8]) -> (Header, usize) {
        match parse(buf) {
            Ok(Parsed::Complete { header, len }) => (header, len),
            other => panic!("{other:?} for {buf:?}"),
        }
    }

    fn proxied(s: &str) -> Header {
        Header::Proxied(s.parse().unwrap())
    }

    /// The spec's v1 examples, its longest lines among them.
    const V1_EXAMPLES: [(&str, Option<&str>); 4] = [
        (
            "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n",
            Some("192.168.0.1:56324"),
        ),
        (
            "PROXY TCP4 255.255.255.255 255.255.255.255 65535 65535\r\n",
            Some("255.255.255.255:65535"),
        ),
        (
            "PROXY TCP6 ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
            Some("[ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]:65535"),
        ),
        (
            "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n",
            None,
        ),
    ];

    #[test]
    fn the_specs_v1_lines_are_read_and_what_follows_is_left() {
        for (line, source) in V1_EXAMPLES {
            let with_request = format!("{line}GET / HTTP/1.1\r\nHost: x\r\n\r\n");
            let (header, len) = complete(with_request.as_bytes());
            assert_eq!(len, line.len(), "{line}");
            assert_eq!(header, source.map_or(Header::Local, proxied), "{line}");
        }
        // The longest line the spec allows is exactly the bound.
        assert_eq!(V1_EXAMPLES[3].0.len(), V1_MAX);
        assert_eq!(complete(b"PROXY UNKNOWN\r\n"), (Header::Local, 15));
        assert_eq!(
            complete(b"PROXY TCP6 2001:db8::7 2001:db8::1 0 443\r\n").0,
            proxied("[2001:db8::7]:0")
        );
    }

    #[test]
    fn the_specs_v2_headers_are_read() {
        // PROXY over TCP/IPv4: 192.0.2.7:56324 to 198.51.100.1:443, and a
        // TLV (a NOOP of 3 bytes) after the addresses.
        let mut block = vec![192, 0, 2, 7, 198, 51, 100, 1];
        block.extend_from_slice(&56324_u16.to_be_bytes());
        block.extend_from_slice(&443_u16.to_be_bytes());
        block.extend_from_slice(&[0x04, 0, 0]);
        let mut h = v2(0x21, 0x11, &block);
        assert_eq!(h.len(), 16 + 15);
        h.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_eq!(complete(&h), (proxied("192.0.2.7:56324"), 31));
        // PROXY over TCP/IPv6.
        let mut block = "2001:db8::7".parse::<Ipv6Addr>().unwrap().octets().to_vec();
        block.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        block.extend_from_slice(&[0xdc, 0x04, 0x01, 0xbb]);
        assert_eq!(
            complete(&v2(0x21, 0x21, &block)),
            (proxied("[2001:db8::7]:56324"), 52)
        );
        // LOCAL keeps the real peer, whatever the block holds.
        assert_eq!(complete(&v2(0x20, 0x00, &[])), (Header::Local, 16));
        assert_eq!(complete(&v2(0x20, 0x11, &[1, 2])), (Header::Local, 18));
        // UNSPEC and UNIX name no IP client.
        assert_eq!(complete(&v2(0x21, 0x00, &[])).0, Header::Local);
        assert_eq!(complete(&v2(0x21, 0x31, &[0; 216])).0, Header::Local);
    }

    #[test]
    fn every_part_of_a_header_is_incomplete() {
        let mut headers: Vec<Vec<u8>> = V1_EXAMPLES
            .iter()
            .map(|(l, _)| l.as_bytes().to_vec())
            .collect();
        headers.push(v2(
            0x21,
            0x11,
            &[192, 0, 2, 7, 198, 51, 100, 1, 0, 80, 1, 187],
        ));
        headers.push(v2(0x20, 0x00, &[]));
        for h in &headers {
            for end in 0..h.len() {
                assert_eq!(parse(&h[..end]), Ok(Parsed::Incomplete), "{:?}", &h[..end]);
            }
        }
    }

    #[test]
    fn bad_headers_are_refused() {
        use HeaderError::*;
        for not in [
            &b"GET / HTTP/1.1\r\n"[..],
            b"PRI * HTTP/2.0\r\n",
            b"\r\n\r\n\0\r\nQUIX",
            b"PROXX",
        ] {
            assert_eq!(parse(not), Err(NotProxy), "{not:?}");
        }
        for malformed in [
            "PROXY TCP4 1.2.3.4 5.6.7.8 080 443\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 +80 443\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 65536 443\r\n",
            "PROXY TCP4 1.2.3.4  5.6.7.8 80 443\r\n",
            "PROXY TCP4 1.2.3.04 5.6.7.8 80 443\r\n",
            "PROXY TCP6 1.2.3.4 5.6.7.8 80 443\r\n",
            "PROXY TCP4 ::1 ::1 80 443\r\n",
            "PROXY TCP4 1.2.3.4 nowhere 80 443\r\n",
            "PROXY TCP6 ::1 1.2.3.4 80 443\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 80 443\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 80\r\n",
            "PROXY TCP4 1.2.3.4 5.6.7.8 80 443 \r\n",
            "PROXY UDP4 1.2.3.4 5.6.7.8 80 443\r\n",
            "PROXY \r\n",
        ] {
            assert!(
                matches!(parse(malformed.as_bytes()), Err(V1Malformed(_))),
                "{malformed:?}: {:?}",
                parse(malformed.as_bytes())
            );
        }
        // "P" alone may still become "PROXY ".
        assert_eq!(parse(b"P"), Ok(Parsed::Incomplete));
        assert_eq!(parse(b"PROXX"), Err(NotProxy));
        let long = format!("PROXY UNKNOWN {}", "a".repeat(V1_MAX));
        assert_eq!(parse(long.as_bytes()), Err(V1TooLong));
        assert!(matches!(
            parse(&v2(0x11, 0x11, &[0; 12])),
            Err(V2Malformed(_))
        ));
        assert!(matches!(
            parse(&v2(0x22, 0x11, &[0; 12])),
            Err(V2Malformed(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x11, &[0; 11])),
            Err(V2Malformed(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x21, &[0; 35])),
            Err(V2Malformed(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x41, &[0; 12])),
            Err(V2Malformed(_))
        ));
        assert!(matches!(
            parse(&v2(0x21, 0x13, &[0; 12])),
            Err(V2Malformed(_))
        ));
        // A length over the bound is refused from the fixed 16 bytes alone.
        let mut big = v2(0x21, 0x11, &[]);
        big[14..16].copy_from_slice(&5000_u16.to_be_bytes());
        assert_eq!(parse(&big), Err(V2TooLong(16 + 5000)));
    }

    #[test]
    fn no_input_panics() {
        let mut seeds: Vec<Vec<u8>> = V1_EXAMPLES
            .iter()
            .map(|(l, _)| l.as_bytes().to_vec())
            .collect();
        seeds.push(v2(0x21, 0x21, &[7; 36]));
        seeds.push(v2(0x21, 0x11, &[7; 12]));
        // Every byte of every seed, set to every value, on every prefix.
        for seed in &seeds {
            for at in 0..seed.len() {
                for value in 0..=255u8 {
                    let mut m = seed.clone();
                    m[at] = value;
                    let _ = parse(&m);
                    let _ = parse(&m[..at]);
                }
            }
        }
        // Pseudo-random bytes behind each signature, of many lengths.
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for len in 0..(V2_MAX + 64) {
            let mut m = if len % 2 == 0 {
                b"PROXY ".to_vec()
            } else {
                V2_SIGNATURE.to_vec()
            };
            while m.len() < len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                m.push(x.to_le_bytes()[0]);
            }
            let _ = parse(&m);
        }
    }
}
