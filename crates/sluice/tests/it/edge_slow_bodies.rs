//! Request bodies sent a byte at a time (issue 26, finding 4). Trickling
//! `POST /v1/check` bodies once held every place under
//! `control_max_connections`, and `/healthz`, `/v1/auth` and `/metrics`
//! answered 503 for as long as they trickled: the head and idle timeouts do
//! not apply while a request is in flight. Now a body must arrive within
//! `control_body_timeout` (`body_timeout` on `listen`): the request gets
//! 408 and its connection closes. The control listener also keeps the data
//! listener's head, idle and per-address limits.
//!
//! The bounds below are guards, several times the configured timeouts:
//! they say "cut off at all", not "cut off fast".

use crate::common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::{Sluice, Upstream, UpstreamReply, client, proxy_config, replace_once, send};
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

/// Sends `head`, then one byte of body a second, until the server closes
/// the connection: what it answered, or `None` if it was still open after
/// `guard`.
async fn trickle(addr: SocketAddr, head: String, guard: Duration) -> Option<String> {
    let start = Instant::now();
    let mut got = Vec::new();
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return Some(String::new());
    };
    let mut wrote = stream.write_all(head.as_bytes()).await.is_ok();
    loop {
        if wrote {
            wrote = stream.write_all(b" ").await.is_ok();
        }
        let mut buf = [0u8; 1024];
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Err(_) => {}
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
        if start.elapsed() > guard {
            return None;
        }
    }
    Some(String::from_utf8_lossy(&got).into_owned())
}

/// A `POST` of `path` whose 1,000-byte body is still to come.
fn post_head(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nX-Api-Key: alice\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickled_check_bodies_are_cut_off_and_the_control_api_answers_again() {
    let timeout = Duration::from_secs(2);
    let s = Sluice::start_with(
        "control-trickle",
        &config("control_max_connections = 8\ncontrol_body_timeout = \"2s\""),
    );
    // More trickling clients than the cap; each keeps going until it is
    // closed, or for five times the timeout.
    let tricklers: Vec<_> = (0..12)
        .map(|_| tokio::spawn(trickle(s.control, post_head("/v1/check"), 5 * timeout)))
        .collect();
    // After three times the timeout, the control API answers again.
    tokio::time::sleep(3 * timeout).await;
    let health = client().get(s.control_url("/healthz")).send().await;
    let status = health.as_ref().map(|r| r.status().as_u16());
    let mut answers = Vec::new();
    for t in tricklers {
        answers.push(t.await.unwrap());
    }
    assert_eq!(
        status.ok(),
        Some(200),
        "/healthz while bodies trickled: {health:?}; tricklers saw {answers:?}"
    );
    let open = answers.iter().filter(|a| a.is_none()).count();
    assert_eq!(open, 0, "trickling connections left open: {answers:?}");
    let answers: Vec<String> = answers.into_iter().flatten().collect();
    let refused = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 503"))
        .count();
    let cut = answers
        .iter()
        .filter(|a| a.starts_with("HTTP/1.1 408"))
        .count();
    // The tricklers did fill the cap: the ones over it were refused.
    assert!(refused >= 1, "{answers:?}");
    assert_eq!(refused + cut, answers.len(), "{answers:?}");
    for a in answers.iter().filter(|a| a.starts_with("HTTP/1.1 408")) {
        assert!(a.contains("connection: close"), "{a}");
        assert!(a.contains("application/problem+json"), "{a}");
    }
    // Still deciding.
    let r = send(
        client()
            .post(s.control_url("/v1/check"))
            .body(r#"{"path":"/","client_ip":"192.0.2.1"}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[tokio::test]
async fn a_body_trickled_through_the_proxy_is_cut_off_with_408() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let text = replace_once(
        &proxy_config(&upstream.url()),
        "[store]",
        "[server]\nbody_timeout = \"2s\"\n\n[store]",
    );
    let s = Sluice::start_with("proxy-trickle", &text);
    // upstream_response_timeout (60 s) would end it too, late and as 504.
    let answer = trickle(s.data, post_head("/upload"), Duration::from_secs(10)).await;
    let answer = answer.expect("the trickling body was never cut off");
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(
        upstream.recorded().is_empty(),
        "the upstream got a whole body"
    );
}

/// Reads until the server closes the connection, within `guard`.
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

#[tokio::test]
async fn the_control_listener_has_the_head_idle_and_per_address_limits_too() {
    let s = Sluice::start_with(
        "control-limits",
        &config("header_read_timeout = \"1s\"\nidle_timeout = \"2s\""),
    );
    // A head sent a byte at a time.
    let slow_head = "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let head = trickle(s.control, slow_head.to_owned(), Duration::from_secs(10)).await;
    assert!(
        head.is_some(),
        "a slow head on the control listener stays open"
    );
    // A keep-alive connection left idle after one request.
    let mut idle = TcpStream::connect(s.control).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = idle.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{:?}", &buf[..n]);
    assert!(
        closed_within(&mut idle, Duration::from_secs(10)).await,
        "an idle control connection stays open"
    );

    // Per address: three places, then 429.
    let s = Sluice::start_with(
        "control-per-ip",
        &config("control_max_connections_per_ip = 3\nheader_read_timeout = \"30s\""),
    );
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(TcpStream::connect(s.control).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let mut extra = TcpStream::connect(s.control).await.unwrap();
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
    // The data plane has its own places.
    assert_eq!(send(client().get(s.url("/"))).await.status, 200);
}
