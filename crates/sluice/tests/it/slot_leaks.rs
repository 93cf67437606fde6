//! No concurrency slot leaks when a connection breaks, on every store: in
//! proxy mode, clients that go away mid-stream and an upstream killed
//! mid-stream each give back every slot they held, at once. The lease is a
//! minute, so a leaked slot cannot come back by its lease ending while the
//! test runs: after the breaks, exactly `max_in_flight` slots are free,
//! counted by taking them through `/v1/check` (one more is refused).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_testkit::{RedisServer, require_redis};

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, TempConfig, client, post_control, send};

const SLOTS: usize = 3;

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
max_in_flight = {SLOTS}
lease = "60s"
"#
    )
}

/// `SLOTS` streaming completions of `key`, each stalled after its first
/// chunk (the next would come in a minute), once all are in flight.
async fn streams_in_flight(
    sluice: &Sluice,
    upstream: &LlmUpstream,
    key: &str,
) -> Vec<tokio::task::JoinHandle<Reply>> {
    let before = upstream.in_flight();
    let streams = (0..SLOTS)
        .map(|_| {
            let request = client()
                .post(sluice.url("/v1/chat/completions"))
                .header("x-api-key", key)
                .header("x-test-chunk-delay-ms", "60000")
                .body(r#"{"model":"m","messages":[],"stream":true}"#);
            tokio::spawn(async move { send(request).await })
        })
        .collect();
    upstream.wait_in_flight(before + SLOTS).await;
    let over = send(
        client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", key)
            .body("{}"),
    )
    .await;
    assert_eq!(over.status, 429, "{key}: every slot is held");
    streams
}

async fn check(sluice: &Sluice, path: &str, body: &Value) -> Reply {
    let reply = post_control(sluice, path, body).await;
    assert!(!reply.has("sluice-fallback"), "the store decided");
    reply
}

/// How many of `key`'s slots are free: takes them through `/v1/check`
/// until one is refused, then releases what it took.
async fn free_slots(sluice: &Sluice, key: &str) -> usize {
    let body = json!({"path": "/v1/chat/completions", "headers": {"X-Api-Key": key}});
    let mut taken = Vec::new();
    while taken.len() <= SLOTS {
        let reply = check(sluice, "/v1/check", &body).await;
        if reply.status != 200 {
            assert_eq!(reply.status, 429);
            break;
        }
        taken.push(
            reply.json()["reservation"]["id"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let free = taken.len();
    for id in taken {
        let released = check(sluice, "/v1/release", &json!({"reservation": id})).await;
        assert_eq!(released.status, 200);
    }
    free
}

/// Waits (up to 5 s, far short of the minute's lease) until all of `key`'s
/// slots are free again: they are given back in tasks of their own.
async fn all_slots_come_back(sluice: &Sluice, key: &str, what: &str) {
    let started = Instant::now();
    loop {
        let free = free_slots(sluice, key).await;
        assert!(free <= SLOTS, "{what}: {free} slots free of {SLOTS}");
        if free == SLOTS {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{what}: {} slot(s) leaked",
            SLOTS - free
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The breaks, on one instance at `store_url` (None: the memory store).
async fn no_slot_leaks_when_connections_break(label: &str, store_url: Option<&str>) {
    let upstream = LlmUpstream::start();
    let file = TempConfig::new(label, &config(&upstream.url()));
    let args: Vec<&str> = store_url.map_or(vec![], |url| vec!["--store-url", url]);
    let sluice = Sluice::start_env(file.path(), &args, &[("SLUICE_KEY_SECRET", "slot-leaks")]);
    assert_eq!(free_slots(&sluice, "quiet").await, SLOTS);

    // Clients that hang up mid-stream.
    let clients = streams_in_flight(&sluice, &upstream, "gone").await;
    for c in clients {
        c.abort();
    }
    all_slots_come_back(&sluice, "gone", "clients gone").await;

    // The upstream killed mid-stream, with every slot held.
    let streams = streams_in_flight(&sluice, &upstream, "cut").await;
    upstream.kill();
    for s in streams {
        // Cut mid-body: the client sees an error or a short body.
        let _ = s.await;
    }
    all_slots_come_back(&sluice, "cut", "upstream killed").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_leaks_when_connections_break_in_memory() {
    no_slot_leaks_when_connections_break("slot-leaks-memory", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_leaks_when_connections_break_on_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    no_slot_leaks_when_connections_break("slot-leaks-redis", Some(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_slot_leaks_when_connections_break_on_a_cluster() {
    if !require_redis() {
        return;
    }
    let cluster = sluice_testkit::redis_cluster::RedisCluster::start(3);
    no_slot_leaks_when_connections_break("slot-leaks-cluster", Some(&cluster.url())).await;
}
