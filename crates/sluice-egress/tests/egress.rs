//! Outbound limits against a local upstream that enforces a quota.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_egress::{EgressError, EgressLayer, EgressLimiter, RateLimitedClient};
use tower_layer::Layer;
use tower_service::Service;

/// What the upstream saw: a sliding log of admitted calls (at most
/// `QUOTA_PER_SECOND` in any second), every arrival, and its refusals.
#[derive(Default)]
struct Log {
    times: std::sync::Mutex<VecDeque<Instant>>,
    hits: AtomicUsize,
    refused: AtomicUsize,
}

const QUOTA_PER_SECOND: usize = 10;

async fn limited(State(log): State<Arc<Log>>) -> (StatusCode, HeaderMap, &'static str) {
    log.hits.fetch_add(1, Ordering::SeqCst);
    let now = Instant::now();
    let mut times = log.times.lock().unwrap();
    while times
        .front()
        .is_some_and(|t| now.duration_since(*t) >= Duration::from_secs(1))
    {
        times.pop_front();
    }
    if times.len() >= QUOTA_PER_SECOND {
        log.refused.fetch_add(1, Ordering::SeqCst);
        let mut h = HeaderMap::new();
        h.insert("retry-after", "1".parse().unwrap());
        return (StatusCode::TOO_MANY_REQUESTS, h, "slow down");
    }
    times.push_back(now);
    (StatusCode::OK, HeaderMap::new(), "ok")
}

async fn says_429(State(log): State<Arc<Log>>) -> (StatusCode, HeaderMap, &'static str) {
    log.hits.fetch_add(1, Ordering::SeqCst);
    let mut h = HeaderMap::new();
    h.insert("retry-after", "60".parse().unwrap());
    (StatusCode::TOO_MANY_REQUESTS, h, "come back in a minute")
}

async fn says_empty(State(log): State<Arc<Log>>) -> (StatusCode, HeaderMap, &'static str) {
    log.hits.fetch_add(1, Ordering::SeqCst);
    let mut h = HeaderMap::new();
    h.insert("ratelimit", "\"day\";r=0;t=120".parse().unwrap());
    (StatusCode::OK, h, "last one today")
}

async fn upstream(path: &'static str) -> (String, Arc<Log>) {
    let log = Arc::new(Log::default());
    let app = axum::Router::new()
        .route("/limited", get(limited))
        .route("/says-429", get(says_429))
        .route("/says-empty", get(says_empty))
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}{path}"), log)
}

fn spec(per_second: u64, burst: u64) -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(per_second),
        burst,
        nodelay: true,
    }
}

fn client(spec: LimitSpec, deadline: Duration) -> RateLimitedClient {
    RateLimitedClient::new(
        reqwest::Client::new(),
        Arc::new(EgressLimiter::new(&spec).unwrap()),
        deadline,
    )
}

#[tokio::test]
async fn concurrent_calls_wait_their_turn_and_the_upstream_never_sees_more_than_its_quota() {
    let (url, log) = upstream("/limited").await;
    // 5/s with a burst of 5: at most 10 in any second, the upstream's quota.
    let client = client(spec(5, 5), Duration::from_secs(30));
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { client.get(&url).await.map(|r| r.status()) })
        })
        .collect();
    for call in calls {
        assert_eq!(
            call.await.unwrap().unwrap(),
            reqwest::StatusCode::OK,
            "no call is lost"
        );
    }
    assert_eq!(log.hits.load(Ordering::SeqCst), 20);
    assert_eq!(
        log.refused.load(Ordering::SeqCst),
        0,
        "the quota was never exceeded"
    );
}

#[tokio::test]
async fn a_call_that_would_pass_its_deadline_fails_at_once_and_is_not_sent() {
    let (url, log) = upstream("/limited").await;
    let client = client(
        LimitSpec {
            rate: Rate::per_minute(1),
            ..spec(1, 1)
        },
        Duration::from_secs(2),
    );
    client.get(&url).await.unwrap();
    match client.get(&url).await {
        Err(EgressError::Deadline { wait, .. }) => assert!(wait > Duration::from_secs(2)),
        other => panic!("expected a deadline error, got {other:?}"),
    }
    assert_eq!(log.hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_429_with_retry_after_pauses_the_host() {
    let (url, log) = upstream("/says-429").await;
    let client = client(spec(100, 100), Duration::from_secs(5));
    let first = client.get(&url).await.unwrap();
    assert_eq!(first.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
    assert!(matches!(
        client.get(&url).await,
        Err(EgressError::Deadline { .. })
    ));
    assert_eq!(
        log.hits.load(Ordering::SeqCst),
        1,
        "the pause held the second call back"
    );
}

#[tokio::test]
async fn a_ratelimit_field_with_nothing_remaining_pauses_the_host() {
    let (url, log) = upstream("/says-empty").await;
    let client = client(spec(100, 100), Duration::from_secs(5));
    client.get(&url).await.unwrap();
    assert!(matches!(
        client.get(&url).await,
        Err(EgressError::Deadline { .. })
    ));
    assert_eq!(log.hits.load(Ordering::SeqCst), 1);
}

/// A bare `http` client service that always answers 429, Retry-After 60.
#[derive(Clone)]
struct Refusing(Arc<AtomicUsize>);

impl Service<http::Request<()>> for Refusing {
    type Response = http::Response<()>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<http::Response<()>, Infallible>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Request<()>) -> Self::Future {
        self.0.fetch_add(1, Ordering::SeqCst);
        let mut r = http::Response::new(());
        *r.status_mut() = http::StatusCode::TOO_MANY_REQUESTS;
        r.headers_mut().insert("retry-after", "60".parse().unwrap());
        std::future::ready(Ok(r))
    }
}

#[tokio::test]
async fn the_tower_layer_limits_per_host_and_follows_429s() {
    let calls = Arc::new(AtomicUsize::new(0));
    let limiter = Arc::new(EgressLimiter::new(&spec(100, 100)).unwrap());
    let mut svc = EgressLayer::new(limiter, Duration::from_secs(1)).layer(Refusing(calls.clone()));
    let req = |host: &str| {
        http::Request::get(format!("http://{host}/x"))
            .body(())
            .unwrap()
    };
    assert_eq!(svc.call(req("a.example")).await.unwrap().status(), 429);
    let err = svc.call(req("a.example")).await.unwrap_err();
    assert!(err.downcast_ref::<EgressError>().is_some(), "{err}");
    // Another host is not paused.
    assert_eq!(svc.call(req("b.example")).await.unwrap().status(), 429);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
}
