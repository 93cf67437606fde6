//! Concurrency slots through what changes under a running instance: with
//! Redis down, the `local` fallback grants slots from this instance's
//! share (⌈max_in_flight / expected_instances⌉) and gives them back
//! locally; and a reload that leaves the concurrency limit as it was
//! keeps the slots that are held.

use std::time::{Duration, Instant};

use sluice_testkit::{RedisServer, require_redis};

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, TempConfig, client, metric, send};

fn limit(max_in_flight: u32) -> String {
    format!(
        r#"
[[limits]]
name = "streams"
key = "header:X-Api-Key"
algorithm = "concurrency"
max_in_flight = {max_in_flight}
lease = "60s"
"#
    )
}

/// A streaming completion of `key`, in a task of its own.
fn spawn(sluice: &Sluice, key: &str) -> tokio::task::JoinHandle<Reply> {
    let request = client()
        .post(sluice.url("/v1/chat/completions"))
        .header("x-api-key", key)
        .body(r#"{"model":"m","messages":[],"stream":true}"#);
    tokio::spawn(async move { send(request).await })
}

async fn call(sluice: &Sluice, key: &str) -> Reply {
    spawn(sluice, key).await.unwrap()
}

/// Sends requests of `key` until one is admitted and held by the upstream
/// (which holds every response); panics after 5 s.
async fn held_soon(
    sluice: &Sluice,
    upstream: &LlmUpstream,
    key: &str,
) -> tokio::task::JoinHandle<Reply> {
    let started = Instant::now();
    let before = upstream.in_flight();
    loop {
        let mut next = spawn(sluice, key);
        tokio::select! {
            reply = &mut next => assert_eq!(reply.unwrap().status, 429),
            () = async {
                while upstream.in_flight() == before {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            } => return next,
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{key}: the slot never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Lets the `held` responses go (each a 200), then checks that `n` of
/// key `k`'s slots are free again: `n` requests held at once, and one more
/// refused.
async fn all_come_back(
    sluice: &Sluice,
    upstream: &LlmUpstream,
    held: Vec<tokio::task::JoinHandle<Reply>>,
    n: usize,
) {
    upstream.release();
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    upstream.hold();
    let again: Vec<_> = (0..n).map(|_| spawn(sluice, "k")).collect();
    upstream.wait_in_flight(n).await;
    assert_eq!(call(sluice, "k").await.status, 429);
    upstream.release();
    for h in again {
        assert_eq!(h.await.unwrap().status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_the_local_fallback_grants_and_takes_back_a_share_of_slots() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let upstream = LlmUpstream::start();
    let text = format!(
        "upstream = \"{}\"\n\n[store]\ntimeout = \"20ms\"\nfallback = \"local\"\nexpected_instances = 2\nbreaker_open = \"200ms\"\n{}",
        upstream.url(),
        limit(3)
    );
    let file = TempConfig::new("slots-fallback", &text);
    let sluice = Sluice::start_env(
        file.path(),
        &["--store-url", &redis.url()],
        &[("SLUICE_KEY_SECRET", "slots-fallback")],
    );
    redis.kill();
    upstream.hold();

    // This instance's share of 3 slots over 2 instances: 2.
    let mut held: Vec<_> = (0..2).map(|_| spawn(&sluice, "k")).collect();
    upstream.wait_in_flight(2).await;
    let refused = call(&sluice, "k").await;
    refused.problem(429);
    assert!(refused.has("sluice-fallback"), "the fallback decided");

    // A client that leaves gives its slot back to the local share.
    held.pop().unwrap().abort();
    upstream.wait_in_flight(1).await;
    held.push(held_soon(&sluice, &upstream, "k").await);
    upstream.wait_in_flight(2).await;
    assert_eq!(
        call(&sluice, "k").await.status,
        429,
        "the share is full again"
    );

    // Responses that end give theirs back too: the whole share is free.
    all_come_back(&sluice, &upstream, held, 2).await;
    assert_eq!(upstream.max_in_flight(), 2, "never more than the share");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_keeps_the_slots_held() {
    let upstream = LlmUpstream::start();
    let head = format!("upstream = \"{}\"\n", upstream.url());
    let sluice = Sluice::start_with("slots-reload", &format!("{head}{}", limit(2)));
    upstream.hold();
    let held: Vec<_> = (0..2).map(|_| spawn(&sluice, "k")).collect();
    upstream.wait_in_flight(2).await;
    assert_eq!(call(&sluice, "k").await.status, 429);

    // Another limit added: the concurrency limit is unchanged, and the
    // two slots held before the reload still count.
    let other = "\n[[limits]]\nname = \"other\"\nkey = \"ip\"\nrate = \"1000/min\"\nmatch = { path_prefix = \"/other\" }\n";
    std::fs::write(sluice.config_path(), format!("{head}{}{other}", limit(2))).unwrap();
    sluice.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(
        &sluice,
        "sluice_config_reloads_total",
        &[("result", "success")],
    )
    .await
        != Some(1.0)
    {
        assert!(
            Instant::now() < deadline,
            "never reloaded:\n{}",
            sluice.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = call(&sluice, "k").await;
    refused.problem(429);
    assert_eq!(
        refused.header("ratelimit-policy"),
        "\"streams\";q=2;qu=\"concurrent-requests\""
    );

    // They come back to the reloaded limit when their responses end.
    all_come_back(&sluice, &upstream, held, 2).await;
    assert_eq!(upstream.max_in_flight(), 2);
}
