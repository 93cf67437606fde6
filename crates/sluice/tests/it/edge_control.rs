//! Hostile input to `POST /v1/check`: a `headers` object with more entries
//! than the data plane would ever accept (hyper's limit of 100 header
//! fields) is a 400 problem that says why, and never takes the process
//! down (`http::HeaderMap` panics past about 32,000 entries).

use crate::common;

use common::{Reply, Sluice, client, example_path, send};

/// A `/v1/check` body whose `headers` object holds `X-Api-Key` and
/// `extra` other fields.
fn body_with_headers(extra: usize) -> String {
    let mut headers = serde_json::Map::new();
    headers.insert("X-Api-Key".into(), "hostile".into());
    for i in 0..extra {
        headers.insert(format!("x-h-{i}"), "v".into());
    }
    serde_json::json!({"path": "/", "client_ip": "192.0.2.9", "headers": headers}).to_string()
}

async fn check(sluice: &Sluice, body: String) -> Reply {
    send(
        client()
            .post(sluice.control_url("/v1/check"))
            .header("content-type", "application/json")
            .body(body),
    )
    .await
}

#[tokio::test]
async fn forty_thousand_headers_are_a_400_and_the_server_lives_on() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let body = body_with_headers(40_000);
    assert!(
        body.len() < 1_000_000,
        "the body ({} bytes) stays under the body limit",
        body.len()
    );
    let reply = check(&sluice, body).await;
    let problem = reply.problem(400);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("100"), "{problem}");
    assert!(detail.contains("header"), "{problem}");

    // Still up, still deciding.
    let reply = check(&sluice, body_with_headers(0)).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let health = send(client().get(sluice.control_url("/healthz"))).await;
    assert_eq!(health.status, 200);
    assert!(!sluice.log().contains("panicked"), "{}", sluice.log());
}

#[tokio::test]
async fn one_hundred_headers_pass_and_one_hundred_and_one_are_refused() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    // X-Api-Key and 99 more: exactly 100.
    let reply = check(&sluice, body_with_headers(99)).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["allowed"], true);

    let reply = check(&sluice, body_with_headers(100)).await;
    let problem = reply.problem(400);
    let detail = problem["detail"].as_str().unwrap();
    assert!(detail.contains("check request"), "{problem}");
    assert!(detail.contains("at most 100 header fields"), "{problem}");
    assert!(!sluice.log().contains("panicked"), "{}", sluice.log());
}
