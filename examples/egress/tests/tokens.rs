//! Token quotas on outbound calls, settled from the partner's reported
//! usage: against a local OpenAI-style upstream (JSON and event-stream
//! answers, each reporting the tokens the test asks for), on the memory
//! store and on a real Redis shared by two limiters.
//!
//! They live beside the example, which wires Redis in as an application
//! does: `sluice-egress` itself does not depend on the Redis store.
//!
//! The quotas refill by the day, so that nothing refills while a test runs
//! and every count is exact: a token takes 86.4 s to come back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_egress::{
    EgressError, EgressLayer, EgressLimiter, RateLimitedClient, TokenEstimate, TokenQuota,
};
use sluice_testkit::{RedisServer, require_redis};
use tower_layer::Layer;
use tower_service::Service;

/// One token back every 86.4 s.
const PER_TOKEN: Duration = Duration::from_millis(86_400);

/// An OpenAI-style chat completion that reports `use` tokens (the test's
/// own field) in its usage: as one JSON document, or as an event stream
/// whose last event carries the usage when `stream` is true. With
/// `"use": null` it reports no usage at all.
async fn completion(Json(body): Json<Value>) -> Response {
    let usage = match body["use"].as_u64() {
        Some(n) => {
            json!({"prompt_tokens": n / 2, "completion_tokens": n - n / 2, "total_tokens": n})
        }
        None => Value::Null,
    };
    if body["stream"].as_bool() == Some(true) {
        let events = format!(
            "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            json!({"choices": [{"delta": {"content": "hi"}}], "usage": null}),
            json!({"choices": [], "usage": usage}),
        );
        return ([("content-type", "text/event-stream")], events).into_response();
    }
    Json(json!({"id": "chatcmpl-1", "choices": [], "usage": usage})).into_response()
}

async fn upstream() -> String {
    let app = axum::Router::new().route("/v1/chat/completions", post(completion));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/v1/chat/completions",
        listener.local_addr().unwrap()
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

fn per_day(tokens: u64) -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::new(tokens, 86_400 * 1_000_000_000).unwrap(),
        burst: tokens,
        nodelay: true,
    }
}

/// Calls are not what is limited here: plenty of them.
fn limiter(quota: TokenQuota) -> EgressLimiter {
    EgressLimiter::new(&per_day(1_000_000))
        .unwrap()
        .with_tokens(quota)
        .unwrap()
}

fn client(limiter: Arc<EgressLimiter>) -> RateLimitedClient {
    RateLimitedClient::new(reqwest::Client::new(), limiter, Duration::from_millis(50))
}

/// Sends one call asking for at most `max_tokens` that reports `used`, and
/// reads its answer to the end (which settles it).
async fn call(
    client: &RateLimitedClient,
    url: &str,
    max_tokens: u64,
    used: Option<u64>,
    stream: bool,
) -> Result<(), EgressError> {
    let request = reqwest::Client::new()
        .post(url)
        .json(&json!({"model": "m", "max_tokens": max_tokens, "use": used, "stream": stream}))
        .build()?;
    let response = client.execute(request).await?;
    assert_eq!(response.status(), 200);
    response.bytes().await?;
    Ok(())
}

/// How long a call of `tokens` to `target` would wait now, or `None` if it
/// could go at once (the probe then gives its tokens back).
async fn probe(limiter: &EgressLimiter, target: &str, tokens: u64) -> Option<Duration> {
    match limiter.acquire(target, Some(tokens), Duration::ZERO).await {
        Ok(permit) => {
            permit.settle(0).await;
            None
        }
        Err(EgressError::Deadline { wait, .. }) => Some(wait),
        Err(e) => panic!("{e}"),
    }
}

/// A settlement runs in a task of its own once the body has been read:
/// waits until a call of `tokens` must wait at least `at_least`, and says
/// how long.
async fn until_waits(
    limiter: &EgressLimiter,
    target: &str,
    tokens: u64,
    at_least: Duration,
) -> Duration {
    for _ in 0..500 {
        if let Some(wait) = probe(limiter, target, tokens).await
            && wait >= at_least
        {
            return wait;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("a call of {tokens} tokens never had to wait {at_least:?}");
}

const HOST: &str = "127.0.0.1";

fn about(wait: Duration, tokens: u64) -> bool {
    // A second of slack for the time the test itself takes.
    let exact = PER_TOKEN * u32::try_from(tokens).unwrap();
    wait <= exact && wait + Duration::from_secs(1) >= exact
}

#[tokio::test]
async fn a_call_settles_at_the_usage_its_answer_reports_into_debt_and_back() {
    let url = upstream().await;
    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000)).max_debt(1_000)));
    let client = client(limiter.clone());

    // Reserves 100, uses 700: 300 left, so a call of 301 waits for 1 token.
    call(&client, &url, 100, Some(700), false).await.unwrap();
    let wait = until_waits(&limiter, HOST, 301, PER_TOKEN / 2).await;
    assert!(about(wait, 1), "{wait:?}");

    // Reserves all 300, uses 50: 250 come back (and 251 wait for one).
    call(&client, &url, 300, Some(50), false).await.unwrap();
    let mut back = false;
    for _ in 0..500 {
        if probe(&limiter, HOST, 250).await.is_none() {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(back, "the 250 unused tokens were never given back");
    let wait = probe(&limiter, HOST, 251).await.unwrap();
    assert!(about(wait, 1), "250 should be left: {wait:?}");

    // Reserves those 250, and reports 1000 at the end of an event stream:
    // 750 beyond, all of it debt.
    call(&client, &url, 250, Some(1_000), true).await.unwrap();
    let wait = until_waits(&limiter, HOST, 1, PER_TOKEN * 700).await;
    assert!(about(wait, 751), "750 in debt, and 1 more: {wait:?}");
    assert_eq!(limiter.excess_tokens(), 0);
    // And a call goes no sooner than that.
    assert!(matches!(
        call(&client, &url, 1, Some(1), false).await,
        Err(EgressError::Deadline { .. })
    ));
}

#[tokio::test]
async fn debt_is_bounded_and_the_excess_is_counted() {
    let url = upstream().await;
    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000)).max_debt(100)));
    let client = client(limiter.clone());
    // Reserves 10 and reports 2000: 990 is what was left, 100 the debt
    // allowed, and 900 the excess.
    call(&client, &url, 10, Some(2_000), false).await.unwrap();
    let wait = until_waits(&limiter, HOST, 1, PER_TOKEN * 90).await;
    assert!(about(wait, 101), "{wait:?}");
    assert_eq!(limiter.excess_tokens(), 900);
}

#[tokio::test]
async fn an_answer_without_usage_keeps_the_estimate_and_so_does_a_body_left_unread() {
    let url = upstream().await;
    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000)).estimate(400)));
    let client = client(limiter.clone());
    // No usage in the answer: the reserved 100 stay spent.
    call(&client, &url, 100, None, true).await.unwrap();
    // A body never read (dropped): its 200 stay spent, whatever it says.
    let request = reqwest::Client::new()
        .post(&url)
        .json(&json!({"max_tokens": 200, "use": 0}))
        .build()
        .unwrap();
    drop(client.execute(request).await.unwrap());
    tokio::time::sleep(Duration::from_millis(100)).await;
    // 700 left: a call of 701 waits for one token.
    let wait = probe(&limiter, HOST, 701).await.unwrap();
    assert!(about(wait, 1), "{wait:?}");
    // A body that names no max_tokens reserves the quota's estimate, 400:
    // 300 are left after it.
    let request = reqwest::Client::new()
        .post(&url)
        .body("not json")
        .build()
        .unwrap();
    drop(client.execute(request).await.unwrap());
    let wait = probe(&limiter, HOST, 301).await.unwrap();
    assert!(about(wait, 1), "{wait:?}");
}

/// A partner behind a bare `http` client service: every answer reports
/// 600 tokens.
#[derive(Clone)]
struct Partner;

impl Service<http::Request<()>> for Partner {
    type Response = http::Response<http_body_util::Full<bytes::Bytes>>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        let body = r#"{"usage":{"prompt_tokens":300,"completion_tokens":300,"total_tokens":600}}"#;
        let mut response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from(body)));
        response
            .headers_mut()
            .insert("content-type", "application/json".parse().unwrap());
        std::future::ready(Ok(response))
    }
}

/// The tower layer: the estimate from the request's extension, the
/// settlement from the answer's body as the caller reads it.
#[tokio::test]
async fn the_tower_layer_settles_from_the_body_it_hands_on() {
    use http_body_util::BodyExt;

    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000))));
    let mut svc = EgressLayer::new(limiter.clone(), Duration::from_millis(50)).layer(Partner);
    let mut request = http::Request::get("http://llm.example/v1")
        .body(())
        .unwrap();
    request.extensions_mut().insert(TokenEstimate(100));
    let response = svc.call(request).await.unwrap();
    response.into_body().collect().await.unwrap();
    // 600 used, whatever the estimate was: 400 left.
    let wait = until_waits(&limiter, "llm.example", 401, PER_TOKEN / 2).await;
    assert!(about(wait, 1), "{wait:?}");
}

/// A reader that stops at the end of the stream (as hyper's writer does)
/// and never polls for the `None` after the last frame still settles.
#[tokio::test]
async fn a_reader_that_stops_at_the_end_of_the_stream_settles_too() {
    use http_body::Body as _;
    use http_body_util::BodyExt;

    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000))));
    let mut svc = EgressLayer::new(limiter.clone(), Duration::from_millis(50)).layer(Partner);
    let request = http::Request::get("http://llm.example/v1")
        .body(())
        .unwrap();
    let mut body = svc.call(request).await.unwrap().into_body();
    while !body.is_end_stream() {
        body.frame().await.unwrap().unwrap();
    }
    // 600 used: 400 left.
    let wait = until_waits(&limiter, "llm.example", 401, PER_TOKEN / 2).await;
    assert!(about(wait, 1), "{wait:?}");
}

/// A quota whose calls reserve nothing is settled all the same.
#[tokio::test]
async fn a_call_that_reserves_no_tokens_is_settled_at_its_usage() {
    let url = upstream().await;
    let limiter = Arc::new(limiter(TokenQuota::new(per_day(1_000)).estimate(0)));
    let client = client(limiter.clone());
    let request = reqwest::Client::new()
        .post(&url)
        .json(&json!({"use": 700}))
        .build()
        .unwrap();
    client
        .execute(request)
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let wait = until_waits(&limiter, HOST, 301, PER_TOKEN / 2).await;
    assert!(about(wait, 1), "{wait:?}");
}

/// Two limiters (two instances of a service) on one Redis: what one call
/// used is owed by both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_the_tokens_and_the_debt() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let url = upstream().await;
    // Each connected before it decides: until then the local fallback
    // would, on its own share.
    let mut limiters = Vec::new();
    for _ in 0..2 {
        let store = sluice_redis::shared(
            redis.url().parse().unwrap(),
            true,
            sluice_redis::ProtectOptions {
                timeout: Duration::from_secs(2),
                ..Default::default()
            },
        );
        store.connect(Duration::from_secs(5)).await.unwrap();
        limiters.push(Arc::new(
            limiter(TokenQuota::new(per_day(1_000)).max_debt(1_000))
                .with_shared_store(store, b"one organisation"),
        ));
    }
    let (a, b) = (limiters[0].clone(), limiters[1].clone());
    // A reserves 100 and uses 1500: 500 in debt, which B must wait for too.
    call(&client(a.clone()), &url, 100, Some(1_500), true)
        .await
        .unwrap();
    let wait = until_waits(&b, HOST, 1, PER_TOKEN * 400).await;
    assert!(about(wait, 501), "{wait:?}");
    let wait = probe(&a, HOST, 1).await.unwrap();
    assert!(about(wait, 501), "{wait:?}");
}
