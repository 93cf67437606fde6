//! The reverse proxy under a hostile client or a failing upstream, against
//! the real binary: `CONNECT` is refused, a broken chunked body is the
//! client's 400, an upstream that never answers or never accepts is a 504,
//! and requests beyond the in-flight cap get 503 at once.

use crate::common;

use std::time::Duration;

use common::{Sluice, Upstream, UpstreamReply, proxy_config, raw_http};

/// The proxy example in front of `url`, with `[server]` settings if any.
fn proxy(url: &str, server: &str) -> String {
    if server.is_empty() {
        return proxy_config(url);
    }
    format!("{}\n[server]\n{server}\n", proxy_config(url))
}

fn upstream(delay: Duration) -> Upstream {
    Upstream::start(UpstreamReply { status: 200, delay })
}

#[tokio::test]
async fn connect_is_refused_and_never_reaches_the_upstream() {
    let up = upstream(Duration::ZERO);
    let s = Sluice::start_with("proxy-connect", &proxy(&up.url(), ""));
    let r = raw_http(
        s.data,
        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nX-Api-Key: k\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 405, "{}", r.text);
    assert_eq!(up.arrived(), 0);
}

#[tokio::test]
async fn a_broken_chunked_body_is_a_400() {
    let up = upstream(Duration::ZERO);
    let s = Sluice::start_with("proxy-chunked", &proxy(&up.url(), ""));
    let r = raw_http(
        s.data,
        "POST /upload HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nnot chunked\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("application/problem+json"), "{}", r.text);
}

#[tokio::test]
async fn an_upstream_that_never_answers_is_a_504() {
    let up = upstream(Duration::from_secs(30));
    let s = Sluice::start_with(
        "proxy-slow",
        &proxy(&up.url(), "upstream_response_timeout = \"1s\""),
    );
    let r = raw_http(
        s.data,
        "GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.text);
    assert!(r.text.contains("application/problem+json"), "{}", r.text);
}

#[tokio::test]
async fn an_upstream_that_never_accepts_is_a_504() {
    // A listener with a backlog of one that never accepts: once its queue
    // is full, the kernel drops further SYNs and connecting hangs.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(c)) = tokio::time::timeout(
            Duration::from_millis(300),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            fillers.push(c);
        }
    }
    let s = Sluice::start_with(
        "proxy-blackhole",
        &proxy(
            &format!("http://{addr}"),
            "upstream_connect_timeout = \"1s\"",
        ),
    );
    let r = raw_http(
        s.data,
        "GET / HTTP/1.1\r\nHost: x\r\nX-Api-Key: k\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 504, "{}", r.text);
    drop(listener);
}

#[tokio::test]
async fn requests_beyond_the_in_flight_cap_get_503_at_once() {
    let up = upstream(Duration::from_secs(3));
    let s = Sluice::start_with("proxy-cap", &proxy(&up.url(), "upstream_max_in_flight = 2"));
    let data = s.data;
    let slow: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(async move {
                raw_http(
                    data,
                    &format!("GET /{i} HTTP/1.1\r\nHost: x\r\nX-Api-Key: k{i}\r\nConnection: close\r\n\r\n"),
                )
                .await
            })
        })
        .collect();
    // Wait until both hold their places at the upstream.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while up.arrived() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = raw_http(
        data,
        "GET /third HTTP/1.1\r\nHost: x\r\nX-Api-Key: k3\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(
        r.text.to_ascii_lowercase().contains("retry-after: 1"),
        "{}",
        r.text
    );
    for t in slow {
        assert_eq!(t.await.unwrap().status, 200);
    }
    // The places came back.
    let r = raw_http(
        data,
        "GET /after HTTP/1.1\r\nHost: x\r\nX-Api-Key: k4\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}
