//! `on_limit = "delay"` and priority classes (`max_share`) on a Redis store,
//! through the real binary, with the memory store's semantics: the delay
//! limit's bucket and the class caps are global (two `sluice serve`
//! processes share one Redis), the queue bound is per instance.

use crate::common;

use std::time::{Duration, Instant};

use crate::policy_features::{delay_config, delay_ms};
use common::{Reply, Sluice, TempConfig, client, send, sf_item};
use sluice_testkit::{RedisServer, require_redis};

const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "test-secret-parity");

/// Two instances of `text` on one Redis (a generous store timeout, so
/// that a busy test machine never hands a request to the fallback).
fn two_on(redis: &RedisServer, label: &str, text: &str) -> (TempConfig, Sluice, Sluice) {
    let config = TempConfig::new(label, &format!("{text}\n[store]\ntimeout = \"2s\"\n"));
    let start = || Sluice::start_env(config.path(), &["--store-url", &redis.url()], &[SECRET]);
    let (a, b) = (start(), start());
    (config, a, b)
}

/// A reply and how long it took.
struct Timed {
    reply: Reply,
    took: Duration,
}

/// Sends `n` requests at once as key `k`, alternating between `a` and `b`.
async fn burst(a: &Sluice, b: &Sluice, n: usize) -> Vec<Timed> {
    let c = client();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let s = if i % 2 == 0 { a } else { b };
            let request = c.get(s.url("/")).header("X-Api-Key", "k");
            tokio::spawn(async move {
                let sent = Instant::now();
                let reply = send(request).await;
                Timed {
                    reply,
                    took: sent.elapsed(),
                }
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    for t in &out {
        assert!(!t.reply.has("sluice-fallback"), "Redis decided");
        assert!(
            t.reply.status == 200 || t.reply.status == 429,
            "{}",
            t.reply.status
        );
    }
    out
}

/// Burst 2 at once; at 1/s, three more fit within 3 s (waits of about 1,
/// 2 and 3 s); the other five would wait longer and are refused. Over two
/// instances: one bucket in Redis, not one per instance (which would admit
/// ten).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delay_limit_on_redis_holds_requests_until_their_slot_and_refuses_beyond() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let (_config, a, b) = two_on(&redis, "redis-delay", &delay_config("3s", 100));
    let replies = burst(&a, &b, 10).await;
    let admitted: Vec<&Timed> = replies.iter().filter(|t| t.reply.status == 200).collect();
    let refused: Vec<&Timed> = replies.iter().filter(|t| t.reply.status == 429).collect();
    // One more only if the ten took over a second to decide (a refill).
    assert!((5..=6).contains(&admitted.len()), "{}", admitted.len());
    let delayed: Vec<&Timed> = admitted
        .iter()
        .copied()
        .filter(|t| delay_ms(&t.reply) > 0)
        .collect();
    assert!(delayed.len() >= 3, "{} were held", delayed.len());
    for t in &delayed {
        let wait = delay_ms(&t.reply);
        assert!(wait <= 3000, "{wait} ms > max_delay");
        // Held: the answer came no sooner than its wait.
        assert!(
            t.took >= Duration::from_millis(wait),
            "answered after {:?}, held {wait} ms",
            t.took
        );
    }
    // The slots are one second apart: the last one is about 3 s out.
    let longest = delayed.iter().map(|t| t.took).max().unwrap();
    assert!(longest >= Duration::from_secs(2), "{longest:?}");
    for t in &refused {
        assert!(t.reply.int_header("retry-after") >= 1);
        assert_eq!(t.reply.problem(429)["status"], 429);
    }
}

/// max_delay is long (30 s) but only 2 may wait at once on each instance:
/// on one instance, 2 pass at once, 2 wait (1 s and 2 s), the other 6 are
/// refused and charged nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_delay_queue_on_redis_refuses_what_does_not_fit_the_burst() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let config = TempConfig::new(
        "redis-delay-queue",
        &format!("{}\n[store]\ntimeout = \"2s\"\n", delay_config("30s", 2)),
    );
    let s = Sluice::start_env(config.path(), &["--store-url", &redis.url()], &[SECRET]);
    let replies = burst(&s, &s, 10).await;
    let admitted = replies.iter().filter(|t| t.reply.status == 200).count();
    let delayed: Vec<&Timed> = replies
        .iter()
        .filter(|t| t.reply.status == 200 && delay_ms(&t.reply) > 0)
        .collect();
    // One more only if the ten took over a second to decide.
    assert!((4..=5).contains(&admitted), "{admitted}");
    assert!((2..=3).contains(&delayed.len()), "{}", delayed.len());
    for t in &delayed {
        assert!(t.took >= Duration::from_millis(delay_ms(&t.reply)));
    }
    for t in replies.iter().filter(|t| t.reply.status == 429) {
        let retry = t.reply.int_header("retry-after");
        assert!(retry >= 1, "{retry}");
    }
    // The refusals were charged nothing: the bucket is 2 + the held ones
    // into its 30 s extension, so the next request (the queue drained or
    // not) waits no longer than those few seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = send(client().get(s.url("/")).header("X-Api-Key", "k")).await;
        if r.status == 200 {
            assert!(delay_ms(&r) <= 5000, "{}", delay_ms(&r));
            break;
        }
        assert!(Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Priority classes: free may take at most half of a global bucket of 20.
/// The memory store's test (`policy_features`) uses it too.
pub const CLASSES: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "1000/h", burst = 1000 }]

[plans.pro]
limits = [{ rate = "1000/h", burst = 1000 }]

[keys]
pro-1 = "pro"
pro-2 = "pro"

[[limits]]
name = "backend"
key = "global"
rate = "20/h"
burst = 20
max_share = { free = 50 }
"#;

/// Free keys, spread over two instances, get exactly their 50 % of the
/// global bucket (10 of 20), each seeing what its class may still use; pro
/// keys then get the other 10, and not one more.
#[tokio::test]
async fn a_class_share_is_one_global_cap_across_instances() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let (_config, a, b) = two_on(&redis, "redis-classes", CLASSES);
    let c = client();
    let mut free = 0;
    for i in 0..30 {
        let s = if i % 2 == 0 { &a } else { &b };
        let r = send(
            c.get(s.url("/"))
                .header("X-Api-Key", format!("free-{}", i % 5)),
        )
        .await;
        assert!(!r.has("sluice-fallback"));
        if r.status == 200 {
            free += 1;
            let left = sf_item(&r.ratelimit(), "backend").param("r");
            assert_eq!(left, 10 - free, "the class sees its own share");
        } else {
            assert_eq!(r.status, 429);
            assert!(r.int_header("retry-after") >= 1);
        }
    }
    assert_eq!(free, 10, "free used exactly 50 % of 20, on both instances");
    for i in 0..10 {
        let s = if i % 2 == 0 { &b } else { &a };
        let key = format!("pro-{}", i % 2 + 1);
        let r = send(c.get(s.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(r.status, 200, "pro request {i} got the reserved room");
    }
    let r = send(c.get(a.url("/")).header("X-Api-Key", "pro-1")).await;
    assert_eq!(r.status, 429, "the bucket is empty now");
}

/// 30 free requests and 10 pro ones, interleaved, all at once, over two
/// instances: free never takes more than its share, and every pro request
/// gets through.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn priority_classes_on_redis_keep_room_for_pro_under_a_mixed_load() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let (_config, a, b) = two_on(&redis, "redis-classes-mixed", CLASSES);
    let c = client();
    let tasks: Vec<_> = (0..40)
        .map(|n| {
            let key = if n % 4 == 3 {
                format!("pro-{}", n % 2 + 1)
            } else {
                format!("free-{}", n % 5)
            };
            let s = if n % 2 == 0 { &a } else { &b };
            let request = c.get(s.url("/")).header("X-Api-Key", key.clone());
            tokio::spawn(async move { (key, send(request).await) })
        })
        .collect();
    let (mut free, mut pro) = (0, 0);
    for t in tasks {
        let (key, r) = t.await.unwrap();
        assert!(!r.has("sluice-fallback"));
        assert!(r.status == 200 || r.status == 429, "{}", r.status);
        if r.status == 200 {
            if key.starts_with("pro") {
                pro += 1;
            } else {
                free += 1;
            }
        }
    }
    assert!(free <= 10, "free used at most 50 % of 20: {free}");
    assert_eq!(pro, 10, "every pro request got through");
}

/// While Redis cannot be reached (nothing listens on port 1), the local
/// fallback decides with the memory store's semantics: the delay limit
/// holds what fits within max_delay and refuses the rest, and the free
/// class is cut at its share while pro gets the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_local_fallback_delays_and_caps_classes_too() {
    let store = "\n[store]\ntimeout = \"20ms\"\nfallback = \"local\"\n";
    let dead = ["--store-url", "redis://127.0.0.1:1"];
    let c = client();

    let config = TempConfig::new("fallback-delay", &(delay_config("3s", 100) + store));
    let s = Sluice::start_env(config.path(), &dead, &[SECRET]);
    let tasks: Vec<_> = (0..10)
        .map(|_| {
            let request = c.get(s.url("/")).header("X-Api-Key", "k");
            tokio::spawn(async move {
                let sent = Instant::now();
                (send(request).await, sent.elapsed())
            })
        })
        .collect();
    let (mut admitted, mut delayed) = (0, 0);
    for t in tasks {
        let (r, took) = t.await.unwrap();
        assert_eq!(r.header("sluice-fallback"), "local");
        if r.status == 200 {
            admitted += 1;
            let wait = delay_ms(&r);
            if wait > 0 {
                delayed += 1;
                assert!(took >= Duration::from_millis(wait), "{took:?} < {wait} ms");
            }
        } else {
            assert_eq!(r.status, 429);
        }
    }
    assert!((5..=6).contains(&admitted), "{admitted}");
    assert!(delayed >= 3, "{delayed} were held");

    let config = TempConfig::new("fallback-classes", &(CLASSES.to_owned() + store));
    let s = Sluice::start_env(config.path(), &dead, &[SECRET]);
    let mut free = 0;
    for i in 0..30 {
        let r = send(
            c.get(s.url("/"))
                .header("X-Api-Key", format!("free-{}", i % 5)),
        )
        .await;
        assert_eq!(r.header("sluice-fallback"), "local");
        free += u32::from(r.status == 200);
    }
    assert_eq!(free, 10, "free used exactly 50 % of 20");
    for i in 0..10 {
        let key = format!("pro-{}", i % 2 + 1);
        let r = send(c.get(s.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(r.status, 200, "pro request {i}");
    }
}
