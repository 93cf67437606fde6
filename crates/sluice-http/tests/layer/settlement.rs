//! Costs settled after the response through the layer: the handler reports
//! the actual cost in a response extension, or the rule reads the bytes
//! the body sent; the difference to the estimate is given back or charged
//! into debt when the body ends, and a key in debt is refused.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Path;
use axum::{Router, routing::get};
use http::{Response, StatusCode};
use sluice_http::RateLimitLayer;
use sluice_http::metrics::{Metrics, SettleResult};
use sluice_http::settling_body::ActualCost;

use super::serve;

const TOKENS: &str = r#"
    [[limits]]
    name = "tokens"
    key = "ip"
    rate = "1000/min"
    burst = 1000
    cost = 100
    settle = { from = "reported", max_debt = 300 }

    [[limits]]
    name = "bytes"
    key = "ip"
    match = { path_prefix = "/stream" }
    rate = "10000/min"
    burst = 10000
    cost = 1
    settle = { from = "body_bytes" }
"#;

async fn used(Path(n): Path<u64>) -> Response<Body> {
    let mut r = Response::new(Body::from("done"));
    r.extensions_mut().insert(ActualCost(n));
    r
}

async fn stream() -> Body {
    let chunks = (0..3).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'x'; 1000])));
    Body::from_stream(futures_util::stream::iter(chunks))
}

/// Waits (up to 5 s) until `limit` has `n` settlements with `result`.
async fn settled(metrics: &Metrics, limit: &str, result: SettleResult, n: u64) {
    for _ in 0..500 {
        if metrics.settlements(limit, result) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{limit}: fewer than {n} settlements {result:?}");
}

fn remaining(r: &reqwest::Response, limit: &str) -> u64 {
    let fields = r.headers()["ratelimit"].to_str().unwrap();
    let item = fields
        .split(", ")
        .find(|i| i.starts_with(&format!("\"{limit}\"")))
        .unwrap();
    let r = item.split(";r=").nth(1).unwrap();
    r.split(';').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn the_reported_cost_is_settled_when_the_body_ends() {
    let layer = RateLimitLayer::from_toml(TOKENS).unwrap();
    let metrics = Arc::new(Metrics::new(layer.engine(), None));
    let app = Router::new()
        .route("/used/{n}", get(used))
        .route("/stream", get(stream))
        .layer(layer.with_metrics(metrics.clone()));
    let url = serve(app).await;
    let client = reqwest::Client::new();

    let r = client.get(format!("{url}used/40")).send().await.unwrap();
    assert_eq!(remaining(&r, "tokens"), 900, "the estimate");
    assert_eq!(r.text().await.unwrap(), "done");
    settled(&metrics, "tokens", SettleResult::refunded, 1).await;
    let r = client.get(format!("{url}used/1000")).send().await.unwrap();
    assert_eq!(remaining(&r, "tokens"), 1000 - 40 - 100);
    r.text().await.unwrap();
    // 900 beyond the estimate: 860 fill the bucket, 40 are debt.
    settled(&metrics, "tokens", SettleResult::debited, 1).await;
    let r = client.get(format!("{url}used/1")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS, "in debt");
    // 40 of debt and 100 of cost at 1000/min: 8.4 s.
    assert_eq!(r.headers()["retry-after"], "9");

    // The bytes a streamed body sent: 3000 for an estimate of 1.
    let r = client.get(format!("{url}stream")).send().await;
    let r = r.unwrap();
    assert_eq!(
        r.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "`tokens` applies too"
    );
}

#[tokio::test]
async fn a_streamed_body_is_settled_at_the_bytes_it_sent() {
    let layer = RateLimitLayer::from_toml(TOKENS).unwrap();
    let metrics = Arc::new(Metrics::new(layer.engine(), None));
    let app = Router::new()
        .route("/stream", get(stream))
        .layer(layer.with_metrics(metrics.clone()));
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let r = client.get(format!("{url}stream")).send().await.unwrap();
    assert_eq!(remaining(&r, "bytes"), 9999);
    // Bytes in the draft's unit for them; tokens have none (requests is
    // the default, so none is sent).
    assert_eq!(
        r.headers()["ratelimit-policy"],
        "\"tokens\";q=1000;w=60, \"bytes\";q=10000;w=60;qu=\"content-bytes\""
    );
    assert_eq!(r.bytes().await.unwrap().len(), 3000);
    settled(&metrics, "bytes", SettleResult::debited, 1).await;
    // `tokens` has no report from this handler: its estimate stands.
    settled(&metrics, "tokens", SettleResult::exact, 1).await;
    let r = client.get(format!("{url}stream")).send().await.unwrap();
    assert_eq!(remaining(&r, "bytes"), 10000 - 3000 - 1);
    assert_eq!(remaining(&r, "tokens"), 800);
}
