//! Real IPv6 source addresses, not forwarded ones: Sluice runs in a
//! network namespace of the test's own, listening on the namespace's end
//! of a veth pair, and the test's clients connect from several addresses
//! on the host's end, two in one /64 and one in another. Addresses of one
//! /64 share one per-IP bucket and one `max_connections_per_ip` count; the
//! other /64 has its own.
//!
//! Needs root, `ip` and `nft` (see `sluice_testkit::netns`): skipped
//! without them unless `SLUICE_REQUIRE_NETNS` is set. The namespace, and
//! with it the pair and every address added here, is deleted on drop.

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use common::{TempConfig, sluice_binary};
use sluice_testkit::netns::NetNs;
use sluice_testkit::require_netns;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A guard against hangs, not a timing assertion.
const GUARD: Duration = Duration::from_secs(20);

/// Two /64s on the pair: Sluice listens on `server`, on the namespace's
/// end; `same` are two host-end addresses of its /64 (they differ in all
/// of their last 64 bits), `other` one of the next /64.
struct Ipv6Pair {
    // Dropped last: deleting the namespace removes every address.
    ns: NetNs,
    server: Ipv6Addr,
    same: [Ipv6Addr; 2],
    other: Ipv6Addr,
}

/// The pair's IPv6 networks, unique per test process and test: the pid in
/// the second and third groups, a counter in the fourth.
fn prefixes() -> (String, String) {
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let pid = std::process::id();
    let n = NEXT.fetch_add(2, Ordering::Relaxed);
    let base = format!("fd5c:{:x}:{:x}", pid >> 16, pid & 0xffff);
    (format!("{base}:{n:x}"), format!("{base}:{:x}", n + 1))
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Ipv6Pair {
    fn create() -> Option<Self> {
        let ns = require_netns()?;
        // The host end is the interface holding the namespace's host
        // address.
        let out = Command::new("ip")
            .args(["-o", "-4", "addr", "show", "to"])
            .arg(format!("{}/32", ns.host_addr()))
            .output()
            .expect("run ip");
        let text = String::from_utf8_lossy(&out.stdout);
        let host_if = text
            .split_whitespace()
            .nth(1)
            .unwrap_or_else(|| panic!("no interface holds {}: {text}", ns.host_addr()))
            .to_owned();
        let (a, b) = prefixes();
        let addr = |s: String| -> Ipv6Addr { s.parse().unwrap() };
        let pair = Self {
            server: addr(format!("{a}::1")),
            same: [
                addr(format!("{a}::a")),
                addr(format!("{a}:ffff:ffff:ffff:fffe")),
            ],
            other: addr(format!("{b}::a")),
            ns,
        };
        let name = pair.ns.name().to_owned();
        for host in pair.same.iter().chain([&pair.other]) {
            ip(&[
                "addr",
                "add",
                &format!("{host}/64"),
                "dev",
                &host_if,
                "nodad",
            ]);
        }
        for net in [&a, &b] {
            let mine = format!("{net}::1/64");
            ip(&["-n", &name, "addr", "add", &mine, "dev", "veth0", "nodad"]);
        }
        Some(pair)
    }
}

/// `sluice serve` in the namespace, on `[server]:0`; killed on drop.
struct NsSluice {
    child: Child,
    data: SocketAddr,
    log: Arc<Mutex<String>>,
    _config: TempConfig,
}

impl NsSluice {
    fn start(pair: &Ipv6Pair, label: &str, text: &str) -> Self {
        let config = TempConfig::new(label, text);
        let mut child = Command::new("ip")
            .args(["netns", "exec", pair.ns.name()])
            .arg(sluice_binary())
            .arg("serve")
            .arg("--config")
            .arg(config.path())
            .arg("--listen")
            .arg(format!("[{}]:0", pair.server))
            .args(["--control-listen", "127.0.0.1:0"])
            .env("SLUICE_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sluice in the namespace");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let thread_log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let data = line
                    .strip_prefix("sluice: listening data=http://")
                    .and_then(|rest| rest.split_whitespace().next())
                    .and_then(|addr| addr.parse::<SocketAddr>().ok());
                if let Some(data) = data {
                    let _ = tx.send(data);
                }
                let mut log = thread_log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut s = Self {
            child,
            data: SocketAddr::from(([0u16; 8], 0)),
            log,
            _config: config,
        };
        s.data = rx
            .recv_timeout(GUARD)
            .unwrap_or_else(|e| panic!("sluice did not start ({e}): {}", s.log()));
        s
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

impl Drop for NsSluice {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A connection to `to` from the address `from`.
async fn connect_from(from: Ipv6Addr, to: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v6().expect("socket");
    socket
        .bind(SocketAddr::new(IpAddr::V6(from), 0))
        .unwrap_or_else(|e| panic!("bind {from}: {e}"));
    tokio::time::timeout(GUARD, socket.connect(to))
        .await
        .expect("connect in time")
        .unwrap_or_else(|e| panic!("connect from {from} to {to}: {e}"))
}

/// The status of a response read off `stream` (0 if it closed first). A
/// keep-alive response is read to the end of its `Content-Length` body.
async fn read_status(stream: &mut TcpStream) -> u16 {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let read = async {
        loop {
            let n = stream.read(&mut buf).await.unwrap_or(0);
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got);
            if n == 0 {
                return;
            }
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_owned())
                    })
                    .and_then(|v| v.parse::<usize>().ok());
                if length.is_some_and(|n| body.len() >= n) {
                    return;
                }
            }
        }
    };
    let _ = tokio::time::timeout(GUARD, read).await;
    String::from_utf8_lossy(&got)
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// One request from `from` on a fresh connection; its status.
async fn get_from(s: &NsSluice, from: Ipv6Addr) -> u16 {
    let mut stream = connect_from(from, s.data).await;
    let _ = stream
        .write_all(b"GET / HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n\r\n")
        .await;
    read_status(&mut stream).await
}

#[tokio::test]
async fn addresses_of_one_slash_64_share_a_bucket_and_another_64_has_its_own() {
    let Some(pair) = Ipv6Pair::create() else {
        return;
    };
    let s = NsSluice::start(
        &pair,
        "ipv6-sources-bucket",
        "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 3\n",
    );
    let [a, b] = pair.same;
    // Three requests from two addresses of one /64 spend its burst of 3...
    let mut got = Vec::new();
    for from in [a, b, a, b, a] {
        got.push(get_from(&s, from).await);
    }
    assert_eq!(got, [200, 200, 200, 429, 429], "log:\n{}", s.log());
    // ...and the other /64 has a bucket of its own.
    for want in [200, 200, 200, 429] {
        assert_eq!(get_from(&s, pair.other).await, want, "log:\n{}", s.log());
    }
}

#[tokio::test]
async fn max_connections_per_ip_counts_the_slash_64() {
    let Some(pair) = Ipv6Pair::create() else {
        return;
    };
    let s = NsSluice::start(
        &pair,
        "ipv6-sources-conns",
        "[server]\nmax_connections_per_ip = 2\n\n\
         [[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"100000/s\"\n",
    );
    let [a, b] = pair.same;
    // One keep-alive connection from each address of the /64, each served
    // once and held open: the /64 holds its two places.
    let mut held = Vec::new();
    for from in [a, b] {
        let mut stream = connect_from(from, s.data).await;
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: sluice.test\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(read_status(&mut stream).await, 200, "log:\n{}", s.log());
        held.push(stream);
    }
    // A third connection from either address is refused at once...
    for from in [a, b] {
        assert_eq!(get_from(&s, from).await, 429, "log:\n{}", s.log());
    }
    // ...while the other /64 is served.
    assert_eq!(get_from(&s, pair.other).await, 200, "log:\n{}", s.log());
    // Closing one held connection gives its place back.
    drop(held.remove(0));
    let start = Instant::now();
    while get_from(&s, b).await != 200 {
        assert!(
            start.elapsed() < GUARD,
            "the place was not given back; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
