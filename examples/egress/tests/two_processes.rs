//! Two processes share one partner quota through Redis: the example binary
//! runs twice at once, both with `--redis`, against a local upstream that
//! refuses anything over 15 calls in any second. The shared limit (5 a
//! second, bursts of 5) admits at most 10 in any second of acquisitions, so
//! the upstream must see no refusal and every call must succeed: none is
//! lost, none is over quota. (Without the shared store, two processes would
//! send up to 20 in the first second.) The upstream counts arrivals, not
//! acquisitions: the first burst's calls open new connections and can
//! arrive up to half a second late, bunched with the next ones, so the
//! upstream's bound leaves room above 10 (CI once saw 13 with a bound of 12).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use sluice_testkit::{RedisServer, require_redis};

const QUOTA_PER_SECOND: usize = 15;

#[derive(Default)]
struct Log {
    times: Mutex<VecDeque<Instant>>,
    hits: AtomicUsize,
    refused: AtomicUsize,
}

async fn limited(State(log): State<Arc<Log>>) -> StatusCode {
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
        return StatusCode::TOO_MANY_REQUESTS;
    }
    times.push_back(now);
    StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_respect_one_shared_quota() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let log = Arc::new(Log::default());
    let app = axum::Router::new()
        .route("/limited", get(limited))
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/limited", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let run = |url: String, redis: String| {
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_egress"))
                .args([url.as_str(), "15", "--redis", redis.as_str()])
                .env("SLUICE_KEY_SECRET", "two-processes")
                .output()
                .unwrap()
        })
    };
    let (a, b) = (run(url.clone(), redis.url()), run(url, redis.url()));
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    for out in [&a, &b] {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            text.lines().filter(|l| l.ends_with("200 OK")).count(),
            15,
            "{text}"
        );
    }
    assert_eq!(
        log.hits.load(Ordering::SeqCst),
        30,
        "every call was sent once"
    );
    assert_eq!(
        log.refused.load(Ordering::SeqCst),
        0,
        "the shared quota was never exceeded"
    );
}
