//! Concurrency limits through the real binary: at most N requests of a key
//! in flight in proxy mode, answered 429 with the draft's
//! `concurrent-requests` quota unit beyond; a slot comes back when the
//! response has been sent, when the client drops its connection, or when
//! the upstream breaks off; through `/v1/check` a slot is held until
//! `/v1/release`, or until its lease ends.

use std::time::Duration;

use serde_json::json;

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, client, post_control, send};

fn config(upstream: &str) -> String {
    format!(
        r#"
listen = "127.0.0.1:0"
control_listen = "127.0.0.1:0"
upstream = "{upstream}"

[[limits]]
name = "streams"
key = "header:X-Api-Key"
algorithm = "concurrency"
max_in_flight = 2
lease = "1s"
"#
    )
}

fn completion() -> String {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true})
        .to_string()
}

async fn call(sluice: &Sluice, key: &str) -> Reply {
    send(
        client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", key)
            .body(completion()),
    )
    .await
}

/// Sends requests of `key` until one is admitted (up to 5 s): a slot given
/// back is given back in a task of its own.
async fn admitted_soon(sluice: &Sluice, key: &str) -> Reply {
    for _ in 0..500 {
        let reply = call(sluice, key).await;
        if reply.status != 429 {
            return reply;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{key}: still refused after 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holds_at_most_its_slots_until_its_responses_end() {
    let upstream = LlmUpstream::start();
    let sluice = Sluice::start_with("concurrency", &config(&upstream.url()));
    upstream.hold();
    let held: Vec<_> = (0..2)
        .map(|_| {
            let request = client()
                .post(sluice.url("/v1/chat/completions"))
                .header("x-api-key", "alice")
                .body(completion());
            tokio::spawn(async move { send(request).await })
        })
        .collect();
    upstream.wait_in_flight(2).await;

    let refused = call(&sluice, "alice").await;
    refused.problem(429);
    assert_eq!(refused.int_header("retry-after"), 1);
    assert_eq!(
        refused.header("ratelimit-policy"),
        "\"streams\";q=2;qu=\"concurrent-requests\""
    );
    let status = send(client().get(sluice.control_url("/v1/status")))
        .await
        .json();
    assert_eq!(
        status["settlements"]["limits"]["streams"]["slots_held"], 2,
        "{status}"
    );
    assert!(
        refused.header("ratelimit").starts_with("\"streams\";r=0;"),
        "{}",
        refused.header("ratelimit")
    );
    // Another key has slots of its own.
    let other = tokio::spawn({
        let request = client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", "bob")
            .body(completion());
        async move { send(request).await }
    });
    upstream.wait_in_flight(3).await;

    upstream.release();
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    assert_eq!(other.await.unwrap().status, 200);
    let again = admitted_soon(&sluice, "alice").await;
    assert_eq!(again.status, 200);
    assert_eq!(
        upstream.max_in_flight(),
        3,
        "never more than two of alice's at once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_come_back_when_clients_or_the_upstream_break_off() {
    let upstream = LlmUpstream::start();
    let sluice = Sluice::start_with("concurrency-drops", &config(&upstream.url()));
    // Two clients that give up while the upstream holds their requests.
    upstream.hold();
    let clients: Vec<_> = (0..2)
        .map(|_| {
            let request = client()
                .post(sluice.url("/v1/chat/completions"))
                .header("x-api-key", "carol")
                .body(completion());
            tokio::spawn(async move { send(request).await })
        })
        .collect();
    upstream.wait_in_flight(2).await;
    assert_eq!(call(&sluice, "carol").await.status, 429);
    for c in clients {
        c.abort();
    }
    // Their slots come back while the upstream still holds their requests.
    let next = tokio::spawn({
        let request = client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", "carol")
            .body(completion());
        async move {
            for _ in 0..500 {
                let reply = send(request.try_clone().unwrap()).await;
                if reply.status != 429 {
                    return reply;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the slots of the clients that left never came back");
        }
    });
    // The proxy gave up the requests of the clients that left, and the
    // next one reached the upstream.
    for _ in 0..1000 {
        if upstream.requests() == 3 && upstream.in_flight() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!((upstream.requests(), upstream.in_flight()), (3, 1));
    upstream.release();
    assert_eq!(next.await.unwrap().status, 200);

    // Streams the upstream cuts off mid-way: each slot comes back.
    for _ in 0..4 {
        let cut = client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", "carol")
            .header("x-test-cut-after", "1")
            .body(completion())
            .send()
            .await;
        if let Ok(r) = cut {
            let _ = r.bytes().await;
        }
    }
    assert_eq!(admitted_soon(&sluice, "carol").await.status, 200);
}

#[tokio::test]
async fn the_decision_api_holds_a_slot_until_released_or_until_its_lease_ends() {
    let sluice = Sluice::start_with("concurrency-check", &config("http://127.0.0.1:9"));
    let check = json!({"path": "/export", "headers": {"X-Api-Key": "dave"}});
    let mut ids = vec![String::new(); 2];
    for id in &mut ids {
        let reply = post_control(&sluice, "/v1/check", &check).await;
        assert_eq!(reply.status, 200);
        let body = reply.json();
        assert_eq!(
            body["reservation"]["expires_in_ms"], 1000,
            "the lease: {body}"
        );
        *id = body["reservation"]["id"].as_str().unwrap().to_owned();
    }
    assert_eq!(post_control(&sluice, "/v1/check", &check).await.status, 429);
    let released = post_control(&sluice, "/v1/release", &json!({"reservation": ids[0]})).await;
    assert_eq!(released.status, 200);
    assert_eq!(released.json()["settled"][0]["refunded"], 1);
    let third = post_control(&sluice, "/v1/check", &check).await;
    assert_eq!(third.status, 200);
    assert_eq!(post_control(&sluice, "/v1/check", &check).await.status, 429);
    // Never released: the two slots come back when their lease (1 s) ends.
    let mut admitted = false;
    for _ in 0..400 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let reply = post_control(&sluice, "/v1/check", &check).await;
        if reply.status == 200 {
            admitted = true;
            break;
        }
    }
    assert!(admitted, "the leases never ended");
    let metrics = send(client().get(sluice.control_url("/metrics"))).await;
    let text = String::from_utf8_lossy(&metrics.body);
    assert!(
        text.contains("sluice_reservations_expired_total 2"),
        "{text}"
    );
}

/// With `on_limit = "delay"`, a request that finds every slot held waits
/// for one instead of a 429, and goes through when a response ends; one
/// that finds the waiting room full is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_waits_for_a_slot_when_the_rule_says_delay() {
    let upstream = LlmUpstream::start();
    let text = config(&upstream.url()).replace(
        "lease = \"1s\"",
        "lease = \"1s\"\non_limit = \"delay\"\nmax_delay = \"30s\"\nmax_queue = 1",
    );
    let sluice = Sluice::start_with("slot-wait", &text);
    upstream.hold();
    let spawn = || {
        let request = client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", "alice")
            .body(completion());
        tokio::spawn(async move { send(request).await })
    };
    let held: Vec<_> = (0..2).map(|_| spawn()).collect();
    upstream.wait_in_flight(2).await;
    let waiting = spawn();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "waits for a slot");
    assert_eq!(upstream.requests(), 2, "not sent upstream while it waits");
    let refused = call(&sluice, "alice").await;
    refused.problem(429);

    upstream.release();
    for h in held {
        assert_eq!(h.await.unwrap().status, 200);
    }
    let waited = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("admitted when a slot came back, long before max_delay")
        .unwrap();
    assert_eq!(waited.status, 200);
    assert_eq!(upstream.requests(), 3);
    assert_eq!(upstream.max_in_flight(), 2, "never more than two at once");
}

/// `POST /v1/renew` keeps a reservation's slot past its lease, on the
/// memory store and on Redis: of two slots taken through `/v1/check`, the
/// one renewed every 300 ms is still held after three leases (1 s each),
/// the other came back when its lease ended; a renewal of a released
/// reservation is 409.
async fn a_renewed_slot_outlives_its_lease(label: &str, store_url: Option<&str>) {
    let file = crate::common::TempConfig::new(label, &config("http://127.0.0.1:9"));
    let args: Vec<&str> = store_url.map_or(vec![], |url| vec!["--store-url", url]);
    let sluice = Sluice::start_env(file.path(), &args, &[("SLUICE_KEY_SECRET", "renewals")]);
    let check = json!({"path": "/export", "headers": {"X-Api-Key": "erin"}});
    let take = || async {
        let reply = post_control(&sluice, "/v1/check", &check).await;
        assert!(!reply.has("sluice-fallback"), "the store decided");
        reply
    };
    let kept = take().await.json()["reservation"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(take().await.status, 200, "the second slot, never renewed");
    assert_eq!(take().await.status, 429);
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let renewed = post_control(&sluice, "/v1/renew", &json!({"reservation": kept})).await;
        assert_eq!(renewed.status, 200, "{:?}", renewed.json());
        assert_eq!(renewed.json()["reservation"]["expires_in_ms"], 1000);
    }
    // Three seconds on: one slot free (the lapsed one's), not two.
    assert_eq!(take().await.status, 200);
    assert_eq!(take().await.status, 429, "the renewed slot is still held");
    let released = post_control(&sluice, "/v1/release", &json!({"reservation": kept})).await;
    assert_eq!(released.status, 200);
    let again = post_control(&sluice, "/v1/renew", &json!({"reservation": kept})).await;
    assert_eq!(again.status, 409, "released already");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_slot_outlives_its_lease_in_memory() {
    a_renewed_slot_outlives_its_lease("renew-memory", None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_slot_outlives_its_lease_on_redis() {
    if !sluice_testkit::require_redis() {
        return;
    }
    let redis = sluice_testkit::RedisServer::start();
    a_renewed_slot_outlives_its_lease("renew-redis", Some(&redis.url())).await;
}
