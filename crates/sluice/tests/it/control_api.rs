//! The control API: `POST /v1/check` decides a described request with the
//! same fields as the data plane; bad input is a 400 problem; `/healthz`
//! and `/readyz` answer 200.

use crate::common;

use common::{Reply, Sluice, client, example_path, send, sf_item};
use serde_json::json;

async fn check(sluice: &Sluice, body: &serde_json::Value) -> Reply {
    send(
        client()
            .post(sluice.control_url("/v1/check"))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
}

#[tokio::test]
async fn check_admits_then_refuses_a_described_request() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let request = json!({"path": "/", "headers": {"X-Api-Key": "x"}, "client_ip": "192.0.2.1"});

    let first = check(&sluice, &request).await;
    assert_eq!(first.status, 200);
    assert_eq!(first.header("content-type"), "application/json");
    let body = first.json();
    assert_eq!(body["allowed"], true, "{body}");
    let names: Vec<&str> = body["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["ip-guard", "free"], "{body}");
    let policy = first.policy();
    let free = sf_item(&policy, "free");
    assert_eq!((free.param("q"), free.param("w")), (20, 2));
    let ratelimit = first.ratelimit();
    assert_eq!(sf_item(&ratelimit, "free").param("r"), 19);
    assert!(!first.has("retry-after"));

    // The burst of 20 (the first was one of them), then a refusal.
    let mut admitted = 1;
    let refusal = loop {
        let reply = check(&sluice, &request).await;
        match reply.status {
            200 => admitted += 1,
            429 => break reply,
            s => panic!("status {s}"),
        }
        assert!(admitted < 2000, "never refused");
    };
    assert!(admitted >= 20, "refused after {admitted}");
    let body = refusal.json();
    assert_eq!(body["allowed"], false, "{body}");
    assert!(body["retry_after_ms"].as_u64().unwrap() > 0, "{body}");
    assert!(refusal.int_header("retry-after") >= 1);
    let ratelimit = refusal.ratelimit();
    let free = sf_item(&ratelimit, "free");
    assert_eq!(free.param("r"), 0);
    assert!(free.param("t") >= 1);
}

#[tokio::test]
async fn the_control_api_and_the_data_plane_share_counters() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let request = json!({
        "method": "get",
        "path": "/export?all=1",
        "headers": {"X-Api-Key": "exporter"},
        "client_ip": "192.0.2.7",
    });
    for _ in 0..2 {
        assert_eq!(check(&sluice, &request).await.status, 200);
    }
    let refused = check(&sluice, &request).await;
    assert_eq!(refused.status, 429);
    let limits = refused.json()["limits"].clone();
    let export = limits
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "export")
        .unwrap();
    assert_eq!(export["allowed"], false, "{limits}");

    // The checks spent the key's exports on the data plane too.
    let data = send(
        client()
            .get(sluice.url("/export"))
            .header("X-Api-Key", "exporter"),
    )
    .await;
    let body = data.problem(429);
    assert_eq!(body["violated-policies"], json!(["export"]));
}

#[tokio::test]
async fn bad_check_requests_are_400_problems() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    for body in [
        "{not json",
        "",
        r#"{"headers": {"X-Api-Key": "x"}}"#,
        r#"{"path": "/", "colour": "blue"}"#,
        r#"{"path": "/", "client_ip": "not an ip"}"#,
    ] {
        let reply = send(
            client
                .post(sluice.control_url("/v1/check"))
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        let problem = reply.problem(400);
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("check request"),
            "{body:?}: {problem}"
        );
    }
    // A described request without a key is a 401, as on the data plane.
    let reply = send(
        client
            .post(sluice.control_url("/v1/check"))
            .body(r#"{"path": "/", "client_ip": "192.0.2.1"}"#),
    )
    .await;
    let problem = reply.problem(401);
    assert!(
        problem["detail"].as_str().unwrap().contains("x-api-key"),
        "{problem}"
    );
}

#[tokio::test]
async fn health_and_readiness_answer_200() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    for (path, status) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let reply = send(client.get(sluice.control_url(path))).await;
        assert_eq!(reply.status, 200, "{path}");
        assert_eq!(reply.json()["status"], status, "{path}");
    }
    // The control API is not the data plane: unknown paths are 404.
    let reply = send(client.get(sluice.control_url("/v1/unknown"))).await;
    assert_eq!(reply.status, 404);
}

/// A `match.json` condition reads the check's `body`: a streaming call
/// takes the one slot, a call that says it does not stream is not counted,
/// and a body that is not an object counts, as one the proxy could not
/// read would.
#[tokio::test]
async fn a_json_match_reads_the_described_body() {
    let sluice = Sluice::start_with(
        "check-json-match",
        "[[limits]]\nname = \"streams\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"concurrency\"\nmax_in_flight = 1\nmatch = { json = { name = \"stream\", value = true } }\n",
    );
    let with = |body: serde_json::Value| json!({"method": "POST", "path": "/v1/chat/completions", "headers": {"X-Api-Key": "k"}, "body": body});
    let first = check(&sluice, &with(json!({"model": "m", "stream": true}))).await;
    assert_eq!(first.json()["limits"][0]["name"], "streams");
    assert_eq!(first.status, 200);
    let second = check(&sluice, &with(json!({"stream": true}))).await;
    assert_eq!(second.status, 429, "the slot is held");
    let plain = check(&sluice, &with(json!({"stream": false}))).await;
    assert_eq!(plain.status, 200);
    assert_eq!(plain.json()["limits"], json!([]), "not counted");
    let odd = check(&sluice, &with(json!("stream"))).await;
    assert_eq!(odd.status, 429, "a body that is not an object counts");
}
