//! Concurrency limits across instances on one Redis, through the real
//! binary in proxy mode: two instances share a key's slots; a response that
//! streams longer than a lease keeps its slot (renewed); an instance that
//! is killed (SIGKILL) leaks its slots for no longer than one lease.

use std::time::{Duration, Instant};

use serde_json::json;
use sluice_testkit::{RedisServer, require_redis};

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, TempConfig, client, send};

const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "slots-secret-shared");

fn config(upstream: &str) -> String {
    format!(
        r#"
upstream = "{upstream}"

[store]
timeout = "2s"

[[limits]]
name = "streams"
key = "header:X-Api-Key"
algorithm = "concurrency"
max_in_flight = 2
lease = "1s"
"#
    )
}

fn body() -> String {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
        .to_string()
}

/// A request of `key` to `sluice`, sent in a task of its own.
fn spawn(sluice: &Sluice, key: &str) -> tokio::task::JoinHandle<Reply> {
    let request = client()
        .post(sluice.url("/v1/chat/completions"))
        .header("x-api-key", key)
        .body(body());
    tokio::spawn(async move { send(request).await })
}

/// The status of a request of `key` to `sluice`; 0 when it is admitted and
/// held by the upstream (no answer within 2 s).
async fn status(sluice: &Sluice, key: &str) -> u16 {
    let request = client()
        .post(sluice.url("/v1/chat/completions"))
        .header("x-api-key", key)
        .body(body());
    match tokio::time::timeout(Duration::from_secs(2), send(request)).await {
        Ok(reply) => {
            assert!(!reply.has("sluice-fallback"), "Redis decided");
            reply.status
        }
        Err(_) => 0,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_are_shared_renewed_and_come_back_from_a_killed_instance() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let upstream = LlmUpstream::start();
    let file = TempConfig::new("redis-slots", &config(&upstream.url()));
    let url = redis.url();
    let start = || Sluice::start_env(file.path(), &["--store-url", &url], &[SECRET]);
    let (a, b) = (start(), start());
    upstream.hold();

    // One slot on each instance: the key's two are taken.
    let on_a = spawn(&a, "k");
    let on_b = spawn(&b, "k");
    upstream.wait_in_flight(2).await;
    assert_eq!(status(&a, "k").await, 429);
    assert_eq!(status(&b, "k").await, 429);

    // Held past two leases: both instances renew their slots.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert_eq!(status(&b, "k").await, 429, "renewed slots still count");

    // Instance A is killed with its slot held: within about a lease, B can
    // take it.
    drop(a);
    let _ = on_a.await;
    let killed = Instant::now();
    let mut admitted = None;
    while killed.elapsed() < Duration::from_secs(5) {
        let mut next = spawn(&b, "k");
        // Refused: answered at once. Admitted: held by the upstream.
        match tokio::time::timeout(Duration::from_secs(2), &mut next).await {
            Ok(reply) => assert_eq!(reply.unwrap().status, 429),
            Err(_) => {
                upstream.wait_in_flight(2).await;
                admitted = Some(next);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let next = admitted.expect("the killed instance's slot never came back");
    let waited = killed.elapsed();
    assert!(
        waited >= Duration::from_millis(300),
        "came back in {waited:?}: before its lease"
    );
    upstream.release();
    assert_eq!(on_b.await.unwrap().status, 200);
    assert_eq!(next.await.unwrap().status, 200);
}
