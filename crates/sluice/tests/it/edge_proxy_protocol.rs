//! The PROXY protocol from listed load balancers (`[server]
//! proxy_protocol`), against the real binary: the address a v1 or v2
//! header names is the client for `ip` limits, access lists, trusted-proxy
//! rules and per-address connection caps; a listed peer that sends no header is
//! closed; an unlisted peer's PROXY line is a bad request, not a way to
//! choose its address.

use crate::common;

use std::net::SocketAddr;
use std::time::Duration;

use common::{Sluice, client, send};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Two requests per client address.
const LIMITS: &str = r#"
[client]
trusted_proxies = ["192.0.2.50/32"]

[access]
deny_cidrs = ["192.0.2.66/32"]

[[limits]]
name = "per-ip"
key = "ip"
rate = "2/h"
"#;

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

fn config(server: &str) -> String {
    format!("[server]\n{server}\n{LIMITS}")
}

/// A v1 header naming `source` (to 127.0.0.1:80, or [::1]:80).
fn v1(source: SocketAddr) -> Vec<u8> {
    let (family, destination) = match source {
        SocketAddr::V4(_) => ("TCP4", "127.0.0.1"),
        SocketAddr::V6(_) => ("TCP6", "::1"),
    };
    format!(
        "PROXY {family} {} {destination} {} 80\r\n",
        source.ip(),
        source.port()
    )
    .into_bytes()
}

/// A v2 header: PROXY naming `source`, or LOCAL (`None`).
fn v2(source: Option<SocketAddr>) -> Vec<u8> {
    let mut h = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    let (command, family, mut block) = match source {
        None => (0x20, 0x00, Vec::new()),
        Some(SocketAddr::V4(s)) => {
            let mut b = s.ip().octets().to_vec();
            b.extend_from_slice(&[127, 0, 0, 1]);
            (0x21, 0x11, b)
        }
        Some(SocketAddr::V6(s)) => {
            let mut b = s.ip().octets().to_vec();
            b.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
            (0x21, 0x21, b)
        }
    };
    if let Some(s) = source {
        block.extend_from_slice(&s.port().to_be_bytes());
        block.extend_from_slice(&80_u16.to_be_bytes());
    }
    h.push(command);
    h.push(family);
    h.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
    h.extend_from_slice(&block);
    h
}

/// Sends `bytes` on a fresh connection and reads until the server closes
/// it: the status (0 if none came) and everything it sent.
async fn raw(addr: SocketAddr, bytes: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(bytes).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// The statuses of three requests behind `header`, each with the header
/// fields `extra` too.
async fn three(addr: SocketAddr, header: &[u8], extra: &str) -> Vec<u16> {
    let request = format!("GET / HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(raw(addr, &[header, request.as_bytes()].concat()).await.0);
    }
    statuses
}

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[tokio::test]
async fn each_address_a_header_names_gets_its_own_two_requests() {
    let s = Sluice::start_with(
        "pp-limits",
        &config("proxy_protocol = [\"127.0.0.0/8\"]\nheader_read_timeout = \"1s\""),
    );
    let cases = [
        ("v1 TCP4", v1(addr("192.0.2.10:5000"))),
        ("v2 INET", v2(Some(addr("192.0.2.20:5000")))),
        ("v1 TCP6", v1(addr("[2001:db8:1:2::7]:5000"))),
        ("v2 INET6", v2(Some(addr("[2001:db8:5::9]:5000")))),
        // LOCAL: the balancer's own connection keeps its real peer.
        ("v2 LOCAL", v2(None)),
    ];
    for (name, header) in &cases {
        assert_eq!(
            three(s.data, header, "").await,
            [200, 200, 429],
            "{name}; log:\n{}",
            s.log()
        );
    }
    // An IPv6 client is its /64: another address in it has no more left.
    let same_64 = v1(addr("[2001:db8:1:2::8]:6000"));
    assert_eq!(raw(s.data, &[&same_64[..], REQUEST].concat()).await.0, 429);
    // The named address is checked against trusted_proxies as a peer
    // would be: behind the trusted 192.0.2.50, the client is its
    // X-Forwarded-For.
    let trusted = v1(addr("192.0.2.50:7000"));
    let behind = "X-Forwarded-For: 198.51.100.9\r\n";
    assert_eq!(three(s.data, &trusted, behind).await, [200, 200, 429]);
    let direct = v1(addr("198.51.100.9:7000"));
    assert_eq!(raw(s.data, &[&direct[..], REQUEST].concat()).await.0, 429);

    // Access lists see the named client.
    let denied = v2(Some(addr("192.0.2.66:5000")));
    assert_eq!(raw(s.data, &[&denied[..], REQUEST].concat()).await.0, 403);

    // A listed peer that sends no header, a broken one or nothing at all
    // is closed without an answer (the silent one after the header
    // timeout).
    assert_eq!(raw(s.data, b"").await, (0, String::new()));
    for bytes in [REQUEST, b"PROXY TCP4 192.0.2.10 nowhere 1 2\r\n"] {
        let (status, text) = raw(s.data, &[bytes, REQUEST].concat()).await;
        assert_eq!((status, text.as_str()), (0, ""), "{bytes:?}");
    }
    // The control listener is not behind the balancer.
    assert_eq!(
        send(client().get(s.control_url("/healthz"))).await.status,
        200
    );
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[tokio::test]
async fn an_unlisted_peer_cannot_choose_its_address_with_a_proxy_line() {
    let s = Sluice::start_with("pp-unlisted", &config("proxy_protocol = [\"10.0.0.0/8\"]"));
    for header in [v1(addr("192.0.2.30:5000")), v1(addr("192.0.2.31:5000"))] {
        let (status, text) = raw(s.data, &[&header[..], REQUEST].concat()).await;
        assert_eq!(status, 400, "{text}");
    }
    // The loopback client is still itself, with its two requests.
    assert_eq!(three(s.data, b"", "").await, [200, 200, 429]);
}

#[tokio::test]
async fn the_per_address_connection_cap_counts_the_named_client() {
    let s = Sluice::start_with(
        "pp-caps",
        &config("proxy_protocol = [\"127.0.0.0/8\"]\nmax_connections_per_ip = 1"),
    );
    // One open keep-alive connection for 192.0.2.60.
    let mut held = TcpStream::connect(s.data).await.unwrap();
    let keep_alive = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    held.write_all(&[&v1(addr("192.0.2.60:5000"))[..], keep_alive].concat())
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = held.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    // Its client has no place left; another client behind the same
    // balancer has.
    let (status, text) = raw(
        s.data,
        &[&v1(addr("192.0.2.60:5001"))[..], REQUEST].concat(),
    )
    .await;
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("retry-after: 1"), "{text}");
    let other = raw(
        s.data,
        &[&v1(addr("192.0.2.61:5000"))[..], REQUEST].concat(),
    )
    .await;
    assert_eq!(other.0, 200, "{}", other.1);
    drop(held);
}
