//! deploy/nginx/perimeter.conf with Debian's real nginx, under the path
//! and header tricks a client may play on the edge. Its `limit_req` zones
//! count per client address and per `X-Api-Key` value, with no path rule:
//! every spelling of a path is counted, a key spelled as a list is refused
//! (nginx would count it as a key of its own, and the backend might read
//! one of its keys), the backend sees the key that was counted and only
//! the address nginx wrote, and no trick gets a 500.
//!
//! The per-key zone is slowed to 1 a minute with a burst of 2 (3 admitted
//! at once), so that counts do not depend on how fast the test runs.

use crate::common;

use common::nginx::{Nginx, binary};
use common::{Upstream, UpstreamReply};
use std::time::Duration;

struct Edge {
    upstream: Upstream,
    nginx: Nginx,
}

fn setup() -> Option<Edge> {
    let nginx = binary()?;
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let nginx = Nginx::perimeter(
        &nginx,
        &upstream,
        &[
            (
                "zone=sluice_per_key:10m rate=20r/s",
                "zone=sluice_per_key:10m rate=1r/m".to_owned(),
            ),
            (
                "zone=sluice_per_key burst=40",
                "zone=sluice_per_key burst=2".to_owned(),
            ),
        ],
    );
    Some(Edge { upstream, nginx })
}

impl Edge {
    /// The `X-Api-Key` values of the last request the backend received.
    fn last_keys(&self) -> Vec<String> {
        let seen = self.upstream.recorded();
        let last = seen.last().expect("a request reached the backend");
        last.headers
            .get_all("x-api-key")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect()
    }
}

#[tokio::test]
async fn every_spelling_of_a_path_is_counted() {
    let Some(edge) = setup() else {
        return;
    };
    let key = ["X-Api-Key: paths"];
    let mut got = Vec::new();
    for path in [
        "/export/1",
        "//export/./1",
        "/%65xport/1",
        "/export%2F1",
        "/EXPORT/1",
        "/x/../export/1",
    ] {
        got.push(edge.nginx.status(&format!("GET {path}"), &key).await);
    }
    assert_eq!(got, [200, 200, 200, 429, 429, 429]);
    // nginx refuses the ones it cannot place.
    for path in ["/../export/1", "/%2e%2e/export/1", "/export/%zz"] {
        assert_eq!(edge.nginx.status(&format!("GET {path}"), &key).await, 400);
    }
    assert_eq!(edge.upstream.arrived(), 3);
}

#[tokio::test]
async fn a_spent_key_gets_no_further_by_another_spelling() {
    let Some(edge) = setup() else {
        return;
    };
    for _ in 0..3 {
        assert_eq!(edge.nginx.status("GET /", &["X-Api-Key: k"]).await, 200);
    }
    assert_eq!(edge.last_keys(), ["k"]);
    let spent = edge.upstream.arrived();
    // Counted as k: refused.
    for (line, fields) in [
        ("GET /", &["X-Api-Key: k"][..]),
        ("HEAD /", &["X-Api-Key: k"]),
        ("GET /", &["X-Api-Key:   k  "]),
        ("GET /", &["X-API-KEY: k"]),
        ("GET /", &["X-Api-Key: k", "Connection: X-Api-Key"]),
        ("GET /", &["X-Api-Key: k", "X-Api-Key: other"]),
    ] {
        let r = edge.nginx.send(line, fields).await;
        assert_eq!(r.status, 429, "{line} {fields:?}: {}", r.text);
    }
    // A list is no key: refused, not counted as a fresh one.
    for value in ["k, k", "k, other", "other, k", "k,"] {
        let field = format!("X-Api-Key: {value}");
        let r = edge.nginx.send("GET /", &[&field]).await;
        assert_eq!(r.status, 400, "{value}: {}", r.text);
        assert!(r.text.contains("application/problem+json"), "{}", r.text);
    }
    // Two hosts: nginx refuses them.
    let two_hosts = ["Host: a.test", "Host: b.test", "X-Api-Key: fresh"];
    assert_eq!(edge.nginx.status("GET /", &two_hosts).await, 400);
    assert_eq!(edge.upstream.arrived(), spent);
    // A fresh key first and k second: nginx counts the first line (before
    // 1.23) and the backend sees that one only, or (1.23 on) it reads the
    // lines as a list and refuses them.
    let r = edge
        .nginx
        .send("GET /", &["X-Api-Key: other", "X-Api-Key: k"])
        .await;
    match r.status {
        200 => assert_eq!(edge.last_keys(), ["other"]),
        400 => assert_eq!(edge.upstream.arrived(), spent),
        other => panic!("{other}: {}", r.text),
    }
}

#[tokio::test]
async fn the_backend_sees_only_the_address_nginx_wrote() {
    let Some(edge) = setup() else {
        return;
    };
    let r = edge
        .nginx
        .send(
            "GET /",
            &[
                "X-Api-Key: fwd",
                "X-Forwarded-For: 198.51.100.7",
                "Forwarded: for=198.51.100.7",
                "X-Real-IP: 198.51.100.7",
            ],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = edge.upstream.recorded();
    let headers = &seen.last().unwrap().headers;
    let all = |name: &str| -> Vec<&str> {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect()
    };
    assert_eq!(all("x-forwarded-for"), ["127.0.0.1"]);
    assert!(all("forwarded").is_empty(), "{headers:?}");
    assert!(all("x-real-ip").is_empty(), "{headers:?}");
}
