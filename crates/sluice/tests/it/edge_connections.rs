//! Slow, silent, idle and piled-up connections against the real binary:
//! each is closed or refused, and normal clients (and the control API) are
//! still served meanwhile.
//!
//! The time limits below are guards against a hang, generous beside the
//! configured timeouts; they say "closed at all", not "closed fast".

use crate::common;

use std::time::{Duration, Instant};

use common::{Sluice, client, metric, send};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LIMITS: &str = r#"
[[limits]]
name = "per-ip"
key = "ip"
rate = "100000/s"
"#;

fn config(server: &str) -> String {
    format!("[server]\n{server}\n{LIMITS}")
}

/// Reads until the server closes the connection (EOF or reset), within
/// `guard`; `true` if it did.
async fn closed_within(stream: &mut TcpStream, guard: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + guard;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => {}
        }
    }
}

/// A normal request, with its latency.
async fn timed_get(s: &Sluice) -> (u16, Duration) {
    let start = Instant::now();
    let r = send(client().get(s.url("/"))).await;
    (r.status, start.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_slow_header_connections_are_closed_while_a_normal_client_is_served() {
    let s = Sluice::start_with(
        "slow-headers",
        &config("header_read_timeout = \"2s\"\nmax_connections_per_ip = 5000"),
    );
    let started = Instant::now();
    // Each sends one byte of a request head every 300 ms, for ever.
    let mut slow = Vec::new();
    for _ in 0..2000 {
        let addr = s.data;
        slow.push(tokio::spawn(async move {
            let Ok(mut stream) = TcpStream::connect(addr).await else {
                return None;
            };
            let head = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ";
            let start = Instant::now();
            for byte in head.iter().chain(std::iter::repeat(&b'a')) {
                if stream.write_all(&[*byte]).await.is_err() {
                    break;
                }
                let mut probe = [0u8; 64];
                let read =
                    tokio::time::timeout(Duration::from_millis(300), stream.read(&mut probe)).await;
                if let Ok(Ok(0) | Err(_)) = read {
                    break;
                }
                if start.elapsed() > Duration::from_secs(30) {
                    return None;
                }
            }
            Some(start.elapsed())
        }));
    }
    // Meanwhile, normal requests are answered.
    let mut latencies = Vec::new();
    while started.elapsed() < Duration::from_secs(3) {
        let (status, took) = timed_get(&s).await;
        assert_eq!(status, 200, "log:\n{}", s.log());
        latencies.push(took);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut closed = 0;
    for task in slow {
        if let Some(took) = task.await.unwrap() {
            closed += 1;
            assert!(took < Duration::from_secs(10), "closed only after {took:?}");
        }
    }
    assert_eq!(closed, 2000, "every slow connection is closed");
    latencies.sort();
    let worst = *latencies.last().unwrap();
    eprintln!(
        "normal requests during the slow-header flood: median {:?}, max {worst:?}",
        latencies[latencies.len() / 2]
    );
    // Starvation would be seconds; this guards against it, not a benchmark.
    assert!(
        worst < Duration::from_secs(1),
        "a normal request took {worst:?}"
    );
}

#[tokio::test]
async fn a_silent_connection_and_an_idle_keep_alive_one_are_closed() {
    let s = Sluice::start_with(
        "idle",
        &config("header_read_timeout = \"1s\"\nidle_timeout = \"2s\""),
    );
    // Silent: never sends a byte.
    let mut silent = TcpStream::connect(s.data).await.unwrap();
    // Idle: one request, then nothing.
    let mut idle = TcpStream::connect(s.data).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    let start = Instant::now();
    assert!(
        closed_within(&mut silent, Duration::from_secs(10)).await,
        "the silent connection stays open"
    );
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)).await,
        "the idle keep-alive connection stays open"
    );
    // The idle one got its idle timeout, not the header timeout.
    assert!(start.elapsed() >= Duration::from_millis(1500));
    // The control listener has the same timeouts.
    let mut control = TcpStream::connect(s.control).await.unwrap();
    assert!(
        closed_within(&mut control, Duration::from_secs(10)).await,
        "a silent control connection stays open"
    );
    // Each closure is counted, by listener and reason.
    for (listener, reason) in [
        ("data", "slow_head"),
        ("data", "idle"),
        ("control", "slow_head"),
    ] {
        let n = metric(
            &s,
            "sluice_connections_closed_total",
            &[("listener", listener), ("reason", reason)],
        )
        .await;
        assert!(n.is_none_or(|n| n >= 1.0), "{listener} {reason}: {n:?}");
    }
}

#[tokio::test]
async fn connections_over_the_per_ip_cap_are_refused_and_the_control_api_stays_up() {
    let s = Sluice::start_with(
        "per-ip-cap",
        &config("max_connections_per_ip = 20\nheader_read_timeout = \"30s\""),
    );
    // Twenty silent connections hold every place this address has.
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(TcpStream::connect(s.data).await.unwrap());
    }
    // Give the server a moment to accept them all.
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let mut extra = TcpStream::connect(s.data).await.unwrap();
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut buf))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        let text = String::from_utf8_lossy(&buf[..n]).to_string();
        if text.starts_with("HTTP/1.1 429") || Instant::now() > deadline {
            break text;
        }
    };
    assert!(refused.starts_with("HTTP/1.1 429"), "got {refused:?}");
    assert!(refused.contains("retry-after: 1"), "{refused}");
    // A normal request from the same address is refused too...
    let r = client().get(s.url("/")).send().await;
    assert!(
        r.as_ref().map_or(true, |r| r.status() == 429),
        "over the cap: {r:?}"
    );
    // ...but the control listener has its own cap.
    let health = send(client().get(s.control_url("/healthz"))).await;
    assert_eq!(health.status, 200);
    let refused = metric(
        &s,
        "sluice_connections_refused_total",
        &[("listener", "data"), ("reason", "per_client")],
    )
    .await;
    assert!(refused.is_none_or(|n| n >= 1.0), "{refused:?}");
    let open = metric(&s, "sluice_connections_open", &[("listener", "data")]).await;
    assert!(open.is_none_or(|n| n >= 20.0), "{open:?}");
    // Places come back when connections close.
    held.clear();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        // Until the server has seen the held connections close, a new one
        // is refused with a 429 written before the request is read: the
        // client may take that as an unexpected message.
        let r = client().get(s.url("/")).send().await;
        if r.as_ref().is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(Instant::now() < deadline, "places never came back: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_full_data_plane_leaves_the_control_api_and_reloads_working() {
    let s = Sluice::start_with(
        "full",
        &config(
            "max_connections = 30\nmax_connections_per_ip = 1000\nheader_read_timeout = \"30s\"",
        ),
    );
    let mut held = Vec::new();
    for _ in 0..40 {
        held.push(TcpStream::connect(s.data).await.unwrap());
    }
    let mut extra = TcpStream::connect(s.data).await.unwrap();
    let mut buf = [0u8; 256];
    let n = tokio::time::timeout(Duration::from_secs(5), extra.read(&mut buf))
        .await
        .expect("refused at once")
        .unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 503"), "got {text:?}");
    assert_eq!(
        send(client().get(s.control_url("/healthz"))).await.status,
        200
    );
    assert_eq!(
        send(client().get(s.control_url("/metrics"))).await.status,
        200
    );
    // A reload still reads the file and applies it.
    std::fs::write(
        s.config_path(),
        config(
            "max_connections = 30\nmax_connections_per_ip = 1000\nheader_read_timeout = \"30s\"",
        )
        .replace("per-ip", "per-ip-2"),
    )
    .unwrap();
    s.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = send(
            client()
                .post(s.control_url("/v1/check"))
                .body(r#"{"path":"/","client_ip":"192.0.2.1"}"#),
        )
        .await;
        if r.json()["limits"][0]["name"] == "per-ip-2" {
            break;
        }
        assert!(Instant::now() < deadline, "never reloaded: {}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The CPU time (user and system, in clock ticks) a process has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after the command name (in parentheses, which may hold
    // spaces): utime and stime are the 12th and 13th of those.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[tokio::test]
async fn out_of_file_descriptors_it_backs_off_and_recovers() {
    // 48 open files: fewer than the caps and the reserve, so accepting
    // runs out of descriptors (EMFILE) under the connections below.
    let s = Sluice::start_with_nofile("emfile", &config("header_read_timeout = \"30s\""), 48);
    let mut held = Vec::new();
    for _ in 0..80 {
        for addr in [s.data, s.control] {
            if let Ok(Ok(c)) =
                tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
            {
                held.push(c);
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.log().contains("cannot accept connections; backing off") {
        assert!(
            Instant::now() < deadline,
            "never ran out of descriptors; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // While the kernel's queue still holds connections it cannot accept,
    // the accept loop sleeps rather than spins: far less than a core.
    let before = cpu_ticks(s.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(s.pid()) - before;
    assert!(
        used < 60,
        "{used} ticks of CPU in 2 s while out of descriptors"
    );
    let warnings = s.log().matches("cannot accept connections").count();
    assert!(warnings <= 5, "{warnings} warnings: at most one a second");
    // Once the connections go, it serves again.
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ok = client().get(s.control_url("/healthz")).send().await;
        if ok.is_ok_and(|r| r.status() == 200) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never recovered; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
