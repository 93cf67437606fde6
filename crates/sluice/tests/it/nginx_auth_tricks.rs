//! deploy/nginx/auth_request.conf with Debian's real nginx, under the
//! path and header tricks a client may play on the edge: each request is
//! limited as its canonical form is, or refused with a 4xx; none reaches
//! the upstream past a limit, and none gets a 500 (nginx answers 500 for
//! any status of `/v1/auth` but 2xx, 401 and 403, so a 400 from Sluice
//! that a client can cause at will must not reach it as one).

use crate::common;

use common::nginx::{Nginx, binary};
use common::{Sluice, Upstream, UpstreamReply, raw_http};
use std::time::Duration;

/// Behind nginx on loopback; `extra` goes into `[client]`. Keys have a
/// plan far above what the tests send; `GET /export` is 2 per key, the
/// host `a.test` 1 per key, and the client address 3.
fn config(extra: &str) -> String {
    format!(
        r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"
trusted_proxies = ["127.0.0.1/32"]
{extra}

[plans.free]
limits = [{{ rate = "1/min", burst = 1000 }}]

[[limits]]
name = "export"
key = "header:X-Api-Key"
match = {{ methods = ["GET"], path_prefix = "/export" }}
rate = "1/min"
burst = 2

[[limits]]
name = "host-a"
key = "header:X-Api-Key"
match = {{ host = "a.test" }}
rate = "1/min"
burst = 1

[[limits]]
name = "ip-guard"
key = "ip"
match = {{ path_prefix = "/ip" }}
rate = "1/min"
burst = 3
"#
    )
}

struct Edge {
    _sluice: Sluice,
    upstream: Upstream,
    nginx: Nginx,
}

fn setup(label: &str, extra: &str) -> Option<Edge> {
    let nginx = binary()?;
    let sluice = Sluice::start_with(label, &config(extra));
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let nginx = Nginx::auth_request(&nginx, &sluice, &upstream);
    Some(Edge {
        _sluice: sluice,
        upstream,
        nginx,
    })
}

#[tokio::test]
async fn path_spellings_are_counted_as_their_canonical_path_or_refused() {
    let Some(edge) = setup("nginx-tricks-paths", "") else {
        return;
    };
    let key = ["X-Api-Key: paths"];
    // The export limit (2) is spent by two spellings of /export/1...
    for path in ["/export/1", "//export/./1"] {
        assert_eq!(edge.nginx.status(&format!("GET {path}"), &key).await, 200);
    }
    // ...and every other spelling of it is refused as /export/1 is.
    for path in [
        "/export/1",
        "/x/../export/1",
        "/%65xport/1",
        "/export//1",
        "/export/%2e/1",
        "///export/1?q=%2F",
    ] {
        let r = edge.nginx.send(&format!("GET {path}"), &key).await;
        assert_eq!(r.status, 429, "{path}: {}", r.text);
        assert!(r.text.contains("\"export\""), "{path}: {}", r.text);
    }
    // Spellings that upstreams disagree on are refused with 400, by nginx
    // or by Sluice, never passed or answered 500.
    for path in [
        "/export%2F1",
        "/export%2f1",
        "/export%5C1",
        "/export\\1",
        "/export%001",
        "/../export/1",
        "/%2e%2e/export/1",
        "/export/%zz",
    ] {
        assert_eq!(
            edge.nginx.status(&format!("GET {path}"), &key).await,
            400,
            "{path}"
        );
    }
    // Paths are case-sensitive: /EXPORT is another path (security.md).
    let r = edge.nginx.send("GET /EXPORT/1", &key).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("\"export\""), "{}", r.text);
    assert_eq!(edge.upstream.arrived(), 3);
}

#[tokio::test]
async fn key_and_method_tricks_are_limited_or_refused() {
    let Some(edge) = setup("nginx-tricks-keys", "") else {
        return;
    };
    for _ in 0..2 {
        let r = edge.nginx.send("GET /export/1", &["X-Api-Key: k"]).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let spent = edge.upstream.arrived();
    // k's export limit is spent; none of these gets past it.
    for (line, fields) in [
        ("HEAD /export/1", &["X-Api-Key: k"][..]),
        ("GET /export/1", &["X-Api-Key: k", "X-Api-Key: k"]),
        ("GET /export/1", &["X-Api-Key: k", "Connection: X-Api-Key"]),
        ("GET /export/1", &["X-Api-Key: k", "X-Original-URI: /other"]),
        (
            "GET /export/1",
            &["X-Api-Key: k", "X-Original-Method: POST"],
        ),
    ] {
        let r = edge.nginx.send(line, fields).await;
        assert_eq!(r.status, 429, "{line} {fields:?}: {}", r.text);
    }
    // Two different keys: which client it is would depend on which one is
    // read. Refused with 400, and the problem says why.
    for fields in [
        &["X-Api-Key: k, other"][..],
        &["X-Api-Key: other, k"],
        &["X-Api-Key: other", "X-Api-Key: k"],
    ] {
        let r = edge.nginx.send("GET /export/1", fields).await;
        assert_eq!(r.status, 400, "{fields:?}: {}", r.text);
        assert!(r.text.contains("application/problem+json"), "{}", r.text);
    }
    assert_eq!(edge.upstream.arrived(), spent);
}

#[tokio::test]
async fn host_tricks_are_limited_as_the_host_or_refused() {
    let Some(edge) = setup("nginx-tricks-host", "") else {
        return;
    };
    let key = "X-Api-Key: h";
    // The host limit (1) on a.test is spent...
    assert_eq!(
        edge.nginx.status("GET /", &["Host: a.test", key]).await,
        200
    );
    // ...whatever the case or port it is written with...
    for host in [
        "Host: a.test",
        "Host: A.Test",
        "Host: a.test:8088",
        "Host: a.test.",
    ] {
        let r = edge.nginx.send("GET /", &[host, key]).await;
        assert_eq!(r.status, 429, "{host}: {}", r.text);
        assert!(r.text.contains("\"host-a\""), "{host}: {}", r.text);
    }
    // ...and two hosts, a list, userinfo, or an HTTP/1.1 request without a
    // host are refused.
    for fields in [
        &["Host: b.test", "Host: a.test", key][..],
        &["Host: b.test, a.test", key],
        &["Host: user@a.test", key],
    ] {
        assert_eq!(edge.nginx.status("GET /", fields).await, 400, "{fields:?}");
    }
    let nginx = format!("127.0.0.1:{}", edge.nginx.port).parse().unwrap();
    let r = raw_http(
        nginx,
        "GET / HTTP/1.1\r\nX-Api-Key: h\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.text);
    // HTTP/1.0 may leave the host out; another host is not a.test.
    let r = raw_http(nginx, "GET / HTTP/1.0\r\nX-Api-Key: h\r\n\r\n").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        edge.nginx.status("GET /", &["Host: b.test", key]).await,
        200
    );
    assert_eq!(edge.upstream.arrived(), 3);
}

/// Six keys, each with forwarding fields of its own choosing: the address
/// limit still sees one client, nginx's peer, and stops it after 3.
async fn forged_addresses_gain_nothing(edge: &Edge) {
    let mut got = Vec::new();
    for i in 0..6 {
        let key = format!("X-Api-Key: fwd-{i}");
        let forged = [
            format!("X-Forwarded-For: 198.51.100.{i}"),
            format!("Forwarded: for=198.51.100.{i}"),
            format!("X-Real-IP: 198.51.100.{i}"),
        ];
        let mine = &forged[..=i % 3];
        let mut fields: Vec<&str> = mine.iter().map(String::as_str).collect();
        fields.push(&key);
        got.push(edge.nginx.status("GET /ip", &fields).await);
    }
    assert_eq!(got, [200, 200, 200, 429, 429, 429]);
    assert_eq!(edge.upstream.arrived(), 3);
}

#[tokio::test]
async fn forged_forwarding_fields_gain_nothing_with_the_default_rule() {
    if let Some(edge) = setup("nginx-tricks-fwd", "") {
        forged_addresses_gain_nothing(&edge).await;
    }
}

#[tokio::test]
async fn forged_forwarding_fields_gain_nothing_with_x_forwarded_for_named() {
    if let Some(edge) = setup(
        "nginx-tricks-fwd-named",
        "forwarded_header = \"x-forwarded-for\"",
    ) {
        forged_addresses_gain_nothing(&edge).await;
    }
}
