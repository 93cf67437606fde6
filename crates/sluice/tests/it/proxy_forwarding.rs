//! Reverse proxy: admitted requests reach the upstream unchanged and its
//! answer comes back with the rate-limit fields added; refused requests
//! never reach it.

use crate::common;

use std::time::Duration;

use common::{Sluice, UPSTREAM_BODY, Upstream, UpstreamReply, client, proxy_config, send, sf_item};

/// 1 MiB of varied bytes (every byte value, in no simple pattern).
fn big_body() -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..1 << 20)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            x.to_be_bytes()[0]
        })
        .collect()
}

fn upstream(status: u16) -> Upstream {
    Upstream::start(UpstreamReply {
        status,
        delay: Duration::ZERO,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admitted_post_reaches_the_upstream_byte_identical() {
    let upstream = upstream(201);
    let sluice = Sluice::start_with("proxy-forward", &proxy_config(&upstream.url()));
    let client = client();
    let body = big_body();
    let path_and_query = "/v1/items/42?x=1&y=a%20b&y=c&empty=";

    let reply = send(
        client
            .post(sluice.url(path_and_query))
            .header("X-Api-Key", "k1")
            .header("X-Custom", "alpha")
            .header("X-Multi", "one, two")
            .header("Content-Type", "application/octet-stream")
            .header("Authorization", "Bearer t0ken")
            .header("Cookie", "a=1; b=2")
            .header("Connection", "keep-alive, x-hop")
            .header("X-Hop", "only for the next hop")
            .header("Keep-Alive", "timeout=5")
            .header("Proxy-Authorization", "Basic cHJveHk6cGFzcw==")
            .header("TE", "gzip;q=0.5")
            .body(body.clone()),
    )
    .await;

    // The upstream's answer comes back, with the fields added.
    assert_eq!(reply.status, 201);
    assert_eq!(reply.header("x-upstream"), "yes");
    assert_eq!(reply.header("content-type"), "application/x-upstream");
    let cookies: Vec<&str> = reply
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(cookies, ["a=1", "b=2"]);
    assert_eq!(reply.body, UPSTREAM_BODY.as_bytes());
    let policy = reply.policy();
    let free = sf_item(&policy, "free");
    assert_eq!((free.param("q"), free.param("w")), (20, 2), "{policy:?}");
    let ratelimit = reply.ratelimit();
    assert_eq!(sf_item(&ratelimit, "free").param("r"), 19, "{ratelimit:?}");

    // The request arrived as sent.
    let recorded = upstream.recorded();
    assert_eq!(recorded.len(), 1);
    let got = &recorded[0];
    assert_eq!(got.method, "POST");
    assert_eq!(got.path_and_query, path_and_query);
    for (name, value) in [
        ("x-api-key", "k1"),
        ("x-custom", "alpha"),
        ("x-multi", "one, two"),
        ("content-type", "application/octet-stream"),
        ("authorization", "Bearer t0ken"),
        ("cookie", "a=1; b=2"),
    ] {
        assert_eq!(
            got.headers.get(name).map(|v| v.as_bytes()),
            Some(value.as_bytes()),
            "header `{name}` at the upstream: {:?}",
            got.headers
        );
    }
    // Hop-by-hop fields, and those `Connection` names, stop at the proxy.
    // The client's `TE` stops here; the proxy asks for trailers itself.
    assert_eq!(
        got.headers.get("te").map(|v| v.as_bytes()),
        Some(&b"trailers"[..])
    );
    for name in ["x-hop", "keep-alive", "proxy-authorization"] {
        assert!(
            !got.headers.contains_key(name),
            "hop-by-hop `{name}` was forwarded: {:?}",
            got.headers
        );
    }
    if let Some(connection) = got.headers.get("connection") {
        assert!(
            !connection.to_str().unwrap().contains("x-hop"),
            "{connection:?}"
        );
    }
    assert_eq!(got.body.len(), body.len());
    assert!(got.body == body, "the body changed on the way");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_method_is_forwarded_as_is() {
    let upstream = upstream(200);
    let sluice = Sluice::start_with("proxy-methods", &proxy_config(&upstream.url()));
    let client = client();
    let methods = ["GET", "PUT", "PATCH", "DELETE", "OPTIONS"];
    for (i, method) in methods.iter().enumerate() {
        let reply = send(
            client
                .request(
                    method.parse().unwrap(),
                    sluice.url(&format!("/m/{i}?q={i}")),
                )
                .header("X-Api-Key", "k1")
                .body(format!("body {i}")),
        )
        .await;
        assert_eq!(reply.status, 200, "{method}");
        assert_eq!(reply.body, UPSTREAM_BODY.as_bytes(), "{method}");
    }
    let recorded = upstream.recorded();
    let got: Vec<(String, String, Vec<u8>)> = recorded
        .into_iter()
        .map(|r| (r.method, r.path_and_query, r.body))
        .collect();
    let want: Vec<(String, String, Vec<u8>)> = methods
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (
                (*m).to_owned(),
                format!("/m/{i}?q={i}"),
                format!("body {i}").into_bytes(),
            )
        })
        .collect();
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_base_path_prefixes_the_request_path() {
    let upstream = upstream(200);
    let config = proxy_config(&format!("{}/base/", upstream.url()));
    let sluice = Sluice::start_with("proxy-base", &config);
    let reply = send(
        client()
            .get(sluice.url("/v1/x?q=1"))
            .header("X-Api-Key", "k1"),
    )
    .await;
    assert_eq!(reply.status, 200);
    let recorded = upstream.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path_and_query, "/base/v1/x?q=1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_never_reach_the_upstream() {
    let upstream = upstream(200);
    let sluice = Sluice::start_with("proxy-refused", &proxy_config(&upstream.url()));
    let client = client();

    // The export limit (2/min) refuses deterministically.
    let mut statuses = Vec::new();
    for _ in 0..5 {
        let reply = send(
            client
                .get(sluice.url("/export/report"))
                .header("X-Api-Key", "exporter"),
        )
        .await;
        if reply.status == 429 {
            let body = reply.problem(429);
            assert_eq!(body["violated-policies"], serde_json::json!(["export"]));
            assert!(!reply.has("x-upstream"), "a refusal came from the upstream");
        }
        statuses.push(reply.status);
    }
    assert_eq!(statuses, [200, 200, 429, 429, 429]);
    assert_eq!(upstream.arrived(), 2);

    // A burst on the free plan: exactly the admitted ones arrive.
    let mut admitted = 0;
    let mut refused = 0;
    for _ in 0..40 {
        let reply = send(client.get(sluice.url("/")).header("X-Api-Key", "k1")).await;
        match reply.status {
            200 => {
                assert_eq!(reply.header("x-upstream"), "yes");
                admitted += 1;
            }
            429 => refused += 1,
            s => panic!("status {s}"),
        }
    }
    // A request without a key is refused before the upstream too.
    let no_key = send(client.get(sluice.url("/"))).await;
    no_key.problem(401);

    assert!(admitted >= 20, "admitted {admitted}");
    assert!(refused >= 1, "nothing was refused");
    assert_eq!(upstream.arrived(), 2 + admitted);
    assert_eq!(upstream.recorded().len(), 2 + admitted);
}
