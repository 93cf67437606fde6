//! `deploy/grafana/sluice.json` is a valid dashboard whose queries use only
//! metrics that Sluice exports: every `sluice_*` name in its expressions is
//! in a real `/metrics` scrape of a server on Redis after some traffic.

use crate::common;

use std::collections::BTreeSet;

use common::prom::parse;
use common::{Sluice, client, example_path, send};
use sluice_testkit::{RedisServer, require_redis};

fn dashboard() -> serde_json::Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/sluice.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("valid JSON")
}

/// Every `sluice_…` identifier in the dashboard's queries.
fn used_metrics(d: &serde_json::Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for panel in d["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            common::prom::names_in(expr, &mut names);
        }
    }
    names
}

#[test]
fn the_dashboard_is_well_formed() {
    let d = dashboard();
    assert_eq!(d["title"], "Sluice");
    let panels = d["panels"].as_array().unwrap();
    assert!(panels.len() >= 8);
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(ids.insert(p["id"].as_u64().unwrap()), "duplicate panel id");
        assert!(p["title"].as_str().is_some_and(|t| !t.is_empty()));
        assert!(!p["targets"].as_array().unwrap().is_empty());
    }
    let used = used_metrics(&d);
    for needed in [
        "sluice_decisions_total",
        "sluice_limited_within_plan_total",
        "sluice_limited_retry_after_seconds_bucket",
        "sluice_store_errors_total",
        "sluice_store_latency_seconds_bucket",
        "sluice_store_breaker_state",
        "sluice_top_limited_key_requests",
    ] {
        assert!(used.contains(needed), "the dashboard lacks {needed}");
    }
}

#[tokio::test]
async fn the_dashboard_uses_only_exported_metrics() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let sluice = Sluice::start_env(
        &example_path("quickstart.toml"),
        &["--store-url", &redis.url()],
        &[("SLUICE_KEY_SECRET", "dashboard-test")],
    );
    let client = client();
    for _ in 0..25 {
        send(client.get(sluice.url("/")).header("X-Api-Key", "k")).await;
    }
    let r = send(client.get(sluice.control_url("/metrics"))).await;
    let mut text = String::from_utf8(r.body).unwrap();
    // The store says what it is, to the metrics and the status page.
    let status = send(client.get(sluice.control_url("/v1/status"))).await;
    assert_eq!(status.json()["store"]["kind"], "redis", "{status:?}");
    let Some(samples) = parse(&text) else { return };
    assert_eq!(
        common::prom::value(&samples, "sluice_store_info", &[("store", "redis")]),
        Some(1.0)
    );
    let mut exported: BTreeSet<String> = samples
        .iter()
        .map(|s| s["name"].as_str().unwrap().to_owned())
        .collect();
    // The Envoy service's per-rule statistics, after one call.
    let rls = Sluice::start_env(
        &example_path("envoy-reference.toml"),
        &["--store-url", &redis.url(), "--grpc-listen", "127.0.0.1:0"],
        &[("SLUICE_KEY_SECRET", "dashboard-test")],
    );
    let mut grpc = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(
        format!("http://{}", rls.grpc.expect("grpc")),
    )
    .await
    .unwrap();
    let mut call = crate::envoy_rls::request(
        vec![crate::envoy_rls::descriptor(&[("database", "users")])],
        1,
    );
    call.domain = "mongo_cps".into();
    grpc.should_rate_limit(call).await.unwrap();
    let r = send(client.get(rls.control_url("/metrics"))).await;
    let envoy_text = String::from_utf8(r.body).unwrap();
    let envoy = parse(&envoy_text).expect("parsed before");
    exported.extend(envoy.iter().map(|s| s["name"].as_str().unwrap().to_owned()));
    text.push_str(&envoy_text);
    // Overload protection's series, from a proxy with `[overload]`.
    let overload_text = overload_scrape().await;
    let overload = parse(&overload_text).expect("parsed before");
    exported.extend(
        overload
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned()),
    );
    text.push_str(&overload_text);
    // Settlements, slots and reservations, after a check and a settlement.
    let settle_text = settlement_scrape().await;
    let settle = parse(&settle_text).expect("parsed before");
    exported.extend(
        settle
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_owned()),
    );
    text.push_str(&settle_text);
    let missing: Vec<_> = used_metrics(&dashboard())
        .into_iter()
        .filter(|m| !exported.contains(m))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard uses metrics Sluice does not export: {missing:?}\n{text}"
    );
}

/// A scrape of a proxy with `[overload]`, after enough requests for the
/// gate to have measured the upstream's latency.
async fn overload_scrape() -> String {
    let upstream = crate::common::llm_upstream::LlmUpstream::start();
    let config = format!(
        "upstream = \"{}\"\nno_limits = true\n[overload]\n",
        upstream.url()
    );
    let sluice = Sluice::start_with("dashboard-overload", &config);
    let client = client();
    for _ in 0..30 {
        send(client.get(sluice.url("/healthz"))).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    send(client.get(sluice.url("/healthz"))).await;
    let r = send(client.get(sluice.control_url("/metrics"))).await;
    String::from_utf8(r.body).unwrap()
}

/// A scrape of a server whose limits settle after the request and hold
/// concurrency slots, after one check settled and one unknown settlement.
async fn settlement_scrape() -> String {
    let config = r#"
[[limits]]
name = "tokens"
key = "header:X-Api-Key"
rate = "1000/min"
cost = 10
settle = { from = "reported" }

[[limits]]
name = "streams"
key = "header:X-Api-Key"
algorithm = "concurrency"
max_in_flight = 4
"#;
    let sluice = Sluice::start_with("dashboard-settle", config);
    let client = client();
    let post = |path: &str, body: serde_json::Value| {
        client
            .post(sluice.control_url(path))
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let check = send(post(
        "/v1/check",
        serde_json::json!({"path": "/", "headers": {"X-Api-Key": "k"}}),
    ))
    .await;
    let id = check.json()["reservation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    send(post(
        "/v1/settle",
        serde_json::json!({"reservation": id, "cost": 3}),
    ))
    .await;
    send(post(
        "/v1/settle",
        serde_json::json!({"reservation": "0".repeat(32)}),
    ))
    .await;
    // A settlement past what the key has left: it is in debt.
    let check = send(post(
        "/v1/check",
        serde_json::json!({"path": "/", "headers": {"X-Api-Key": "k"}}),
    ))
    .await;
    let id = check.json()["reservation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    send(post(
        "/v1/settle",
        serde_json::json!({"reservation": id, "cost": 1500}),
    ))
    .await;
    let r = send(client.get(sluice.control_url("/metrics"))).await;
    String::from_utf8(r.body).unwrap()
}
