//! Fields a limit reads that a client could give ambiguously, against the
//! real binary: `Host` twice, missing or with userinfo; a target that names
//! another host; `HEAD` past a limit on `GET`, or `POST` past a limit on
//! `DELETE` by a method-override field; a key header with a list of values
//! on one line; a key header that `Connection` marks hop-by-hop; and the
//! forwarding fields a client writes for the upstream to believe.

use crate::common;

use std::time::Duration;

use common::{Sluice, Upstream, UpstreamReply, example, proxy_config, raw_http};

/// A per-IP limit of 2 on `GET /report`, and one of 1 on the host
/// `a.test`.
const LIMITS: &str = "[[limits]]\nname = \"report\"\nkey = \"ip\"\nmatch = { methods = [\"GET\"], path_prefix = \"/report\" }\nrate = \"1/min\"\nburst = 2\n\n\
[[limits]]\nname = \"host-a\"\nkey = \"ip\"\nmatch = { host = \"a.test\" }\nrate = \"1/min\"\nburst = 1\n";

async fn status(s: &Sluice, head: &str) -> u16 {
    let r = raw_http(s.data, &format!("{head}Connection: close\r\n\r\n")).await;
    r.status
}

#[tokio::test]
async fn two_host_fields_are_refused() {
    let s = Sluice::start_with("host-two", LIMITS);
    // The limit on a.test is spent...
    assert_eq!(status(&s, "GET / HTTP/1.1\r\nHost: a.test\r\n").await, 200);
    assert_eq!(status(&s, "GET / HTTP/1.1\r\nHost: a.test\r\n").await, 429);
    // ...and a request naming b.test first and a.test second (an upstream
    // reading the last serves a.test) is refused, not matched on b.test.
    for head in [
        "GET / HTTP/1.1\r\nHost: b.test\r\nHost: a.test\r\n",
        "GET / HTTP/1.1\r\nHost: b.test, a.test\r\n",
    ] {
        assert_eq!(status(&s, head).await, 400, "{head:?}");
    }
}

#[tokio::test]
async fn a_missing_host_userinfo_or_a_conflicting_target_is_refused() {
    let s = Sluice::start_with("host-bad", LIMITS);
    for head in [
        "GET / HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\nHost: user@b.test\r\n",
        "GET http://a.test/ HTTP/1.1\r\nHost: b.test\r\n",
    ] {
        assert_eq!(status(&s, head).await, 400, "{head:?}");
    }
    // HTTP/1.0 may leave Host out; a target that agrees with Host passes.
    let r = raw_http(s.data, "GET / HTTP/1.0\r\n\r\n").await;
    assert!(r.text.starts_with("HTTP/1.0 200"), "{}", r.text);
    assert_eq!(
        status(&s, "GET http://b.test/ HTTP/1.1\r\nHost: b.test\r\n").await,
        200
    );
    // An absolute-form target that agrees with Host is matched on its host.
    assert_eq!(
        status(&s, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n").await,
        200
    );
    assert_eq!(
        status(&s, "GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\n").await,
        429
    );
}

/// A framework answers HEAD with its GET handler: a limit on GET holds for
/// HEAD too. Before, HEAD was forwarded after GET was refused.
#[tokio::test]
async fn head_is_limited_with_get() {
    let s = Sluice::start_with("head-get", LIMITS);
    let get = "GET /report HTTP/1.1\r\nHost: r.test\r\n";
    let head = "HEAD /report HTTP/1.1\r\nHost: r.test\r\n";
    assert_eq!(status(&s, get).await, 200);
    assert_eq!(status(&s, head).await, 200);
    assert_eq!(status(&s, get).await, 429);
    assert_eq!(status(&s, head).await, 429);
    // POST is not GET.
    assert_eq!(
        status(
            &s,
            "POST /report HTTP/1.1\r\nHost: r.test\r\nContent-Length: 0\r\n"
        )
        .await,
        200
    );
}

/// `X-Api-Key: K, r1` on one line is two values, as on two lines: refused,
/// not counted as a fresh key `K, r1`.
#[tokio::test]
async fn a_list_of_keys_on_one_line_is_refused_like_two_lines() {
    let s = Sluice::start_with("key-list", &example("quickstart.toml"));
    let with = |key: &str| format!("GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: {key}\r\n");
    assert_eq!(status(&s, &with("alice, r1")).await, 400);
    assert_eq!(status(&s, &with("alice,alice")).await, 200);
    assert_eq!(
        status(
            &s,
            "GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: alice\r\nX-Api-Key: r1\r\n"
        )
        .await,
        400
    );
}

/// `Connection: X-Api-Key` makes the key hop-by-hop: the proxy drops it, so
/// the limit must not count it either. Before, the key was counted and the
/// upstream got a request without it.
#[tokio::test]
async fn a_key_the_connection_field_drops_is_not_counted() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let s = Sluice::start_with("conn-key", &proxy_config(&upstream.url()));
    let r = raw_http(
        s.data,
        "GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: alice\r\nConnection: X-Api-Key, close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(upstream.arrived(), 0);
    // Without the Connection option, the key is counted and forwarded.
    let r = raw_http(
        s.data,
        "GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: alice\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let got = upstream.recorded();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].headers.get("x-api-key").unwrap(), "alice");
}

/// `POST` with `X-HTTP-Method-Override: DELETE` is served as `DELETE` by
/// many frameworks: it meets a limit on `DELETE`. Before, it passed.
#[tokio::test]
async fn a_method_override_meets_the_limit_on_its_method() {
    let s = Sluice::start_with(
        "method-override",
        "[[limits]]\nname = \"delete\"\nkey = \"ip\"\nmatch = { methods = [\"DELETE\"] }\nrate = \"1/min\"\nburst = 1\n",
    );
    let post = |field: &str| {
        format!("POST /item HTTP/1.1\r\nHost: d.test\r\nContent-Length: 0\r\n{field}\r\n")
    };
    assert_eq!(
        status(&s, "DELETE /item HTTP/1.1\r\nHost: d.test\r\n").await,
        200
    );
    for field in [
        "X-HTTP-Method-Override: DELETE",
        "X-HTTP-Method: delete",
        "X-Method-Override: PATCH, DELETE",
    ] {
        assert_eq!(status(&s, &post(field)).await, 429, "{field}");
    }
    assert_eq!(status(&s, &post("X-HTTP-Method-Override: PUT")).await, 200);
}

/// The upstream must not believe a client's own forwarding fields: from a
/// peer that is not a trusted proxy they are replaced by Sluice's (its
/// `X-Forwarded-For` is the peer), and a trusted proxy's chain is extended.
/// Before, they went through as the client wrote them.
#[tokio::test]
async fn the_upstream_gets_the_forwarding_fields_sluice_writes() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let forged = "X-Forwarded-For: 6.6.6.6\r\nX-Forwarded-Host: admin.test\r\n\
                  X-Original-URL: /admin/export\r\nX-Real-IP: 6.6.6.6\r\n";
    let s = Sluice::start_with("fwd-fields", &proxy_config(&upstream.url()));
    let head = format!("GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: alice\r\n{forged}");
    assert_eq!(status(&s, &head).await, 200);
    let got = &upstream.recorded()[0].headers;
    assert_eq!(got["x-forwarded-for"], "127.0.0.1");
    assert_eq!(got["x-forwarded-host"], "q.test");
    assert_eq!(got["x-forwarded-proto"], "http");
    assert!(!got.contains_key("x-original-url") && !got.contains_key("x-real-ip"));
    drop(s);
    let trusting = common::replace_once(
        &proxy_config(&upstream.url()),
        "[client]\n",
        "[client]\ntrusted_proxies = [\"127.0.0.0/8\"]\n",
    );
    let s = Sluice::start_with("fwd-fields-trusted", &trusting);
    let head =
        "GET / HTTP/1.1\r\nHost: q.test\r\nX-Api-Key: alice\r\nX-Forwarded-For: 198.51.100.7\r\n";
    assert_eq!(status(&s, head).await, 200);
    let got = &upstream.recorded()[1].headers;
    assert_eq!(got["x-forwarded-for"], "198.51.100.7, 127.0.0.1");
}
