//! Coming back from a Redis outage without over-admitting, with two real
//! instances sharing one key: what each instance's fallback admitted during
//! the outage is charged to Redis before Redis decides for that key again,
//! so a restarted Redis (which has forgotten every key) does not hand out a
//! fresh quota on top.
//!
//! The bound (docs/redis.md): over an outage and its recovery, a key's
//! admissions stay within the global limit plus what the instances'
//! fallback shares admit during the outage.

use crate::common;

use std::time::{Duration, Instant};

use common::{Sluice, client, send};
use sluice_testkit::{RedisServer, require_redis};

/// One key, burst 20, refilling so slowly that nothing refills during the
/// test; two instances, so each fallback's share is 10.
const CONFIG: &str = r#"
[store]
timeout = "200ms"
fallback = "local"
expected_instances = 2
breaker_open = "200ms"
over_limit_cache = false

[[limits]]
name = "shared"
key = "header:X-Api-Key"
algorithm = "token_bucket"
rate = "20/h"
burst = 20
"#;

fn start(label: &str, redis: &RedisServer) -> Sluice {
    let config = common::TempConfig::new(label, CONFIG);
    let mut s = Sluice::start_env(
        config.path(),
        &["--store-url", &redis.url()],
        &[("SLUICE_KEY_SECRET", "recovery-test")],
    );
    s.keep_config(config);
    s
}

/// Sends `n` requests for `key` to `s`; returns (admitted, of them decided
/// by the fallback).
async fn burst(s: &Sluice, key: &str, n: usize) -> (usize, usize) {
    let c = client();
    let (mut admitted, mut fallback) = (0, 0);
    for _ in 0..n {
        let r = send(c.get(s.url("/")).header("X-Api-Key", key)).await;
        assert!(
            r.status == 200 || r.status == 429,
            "status {}: {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        if r.status == 200 {
            admitted += 1;
            if r.has("sluice-fallback") {
                fallback += 1;
            }
        }
    }
    (admitted, fallback)
}

/// Waits until `s` decides on Redis again (a reply without
/// `Sluice-Fallback`), using a key of its own.
async fn wait_for_redis(s: &Sluice) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = send(client().get(s.url("/")).header("X-Api-Key", "probe-key")).await;
        if !r.has("sluice-fallback") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "Redis never came back; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_redis_is_charged_what_the_fallbacks_admitted() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let a = start("recovery-a", &redis);
    let b = start("recovery-b", &redis);
    wait_for_redis(&a).await;
    wait_for_redis(&b).await;

    // Before the outage: 15 of the 20 spent, through both instances.
    let (before_a, _) = burst(&a, "k", 8).await;
    let (before_b, _) = burst(&b, "k", 7).await;
    assert_eq!(before_a + before_b, 15);

    // The outage: each fallback admits its share, 10.
    redis.kill();
    let (during_a, fa) = burst(&a, "k", 15).await;
    let (during_b, fb) = burst(&b, "k", 15).await;
    assert_eq!((during_a, during_b), (10, 10), "each instance's share");
    assert_eq!((fa, fb), (10, 10), "all decided by the fallback");

    // Redis comes back empty (no persistence): without the charge, it
    // would admit 20 more.
    redis.restart();
    wait_for_redis(&a).await;
    wait_for_redis(&b).await;
    let (after_a, _) = burst(&a, "k", 15).await;
    let (after_b, _) = burst(&b, "k", 15).await;

    let total = before_a + before_b + during_a + during_b + after_a + after_b;
    let bound = 20 + 10 + 10;
    assert!(
        total <= bound,
        "admitted {total} over the outage and its recovery (bound {bound}): \
         {before_a}+{before_b} before, {during_a}+{during_b} during, {after_a}+{after_b} after"
    );
    // (Calls that timed out while Redis was going down can still reach it
    // once it is back, and count there too: that errs towards refusing.)
    eprintln!(
        "recovery: {before_a}+{before_b} before, {during_a}+{during_b} during, {after_a}+{after_b} after; {total} of at most {bound}"
    );
}

/// Blocks Redis for `secs` seconds (`DEBUG SLEEP`), from a thread.
fn block_redis(redis: &RedisServer, secs: &'static str) -> std::thread::JoinHandle<()> {
    let port = redis.port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
        let cmd = format!(
            "*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n${}\r\n{secs}\r\n",
            secs.len()
        );
        s.write_all(cmd.as_bytes()).expect("send DEBUG SLEEP");
        let mut buf = [0u8; 64];
        let _ = s.read(&mut buf);
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_during_the_probe_wait_for_it_instead_of_falling_back() {
    if !require_redis() {
        return;
    }
    // DEBUG is off by default since Redis 7.
    let redis = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let a = start("recovery-probe", &redis);
    wait_for_redis(&a).await;
    // Redis blocked for 1.2 s: three calls in a row time out (200 ms each)
    // and the breaker opens.
    let blocked = block_redis(&redis, "1.2");
    tokio::time::sleep(Duration::from_millis(50)).await;
    burst(&a, "warm", 4).await;
    let metrics = send(client().get(a.control_url("/metrics"))).await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    assert!(
        text.contains("sluice_store_breaker_state 1"),
        "the breaker did not open:\n{text}"
    );
    blocked.join().unwrap();
    // The breaker wants a probe after 200 ms. Block Redis for 150 ms (less
    // than the timeout) and send 20 requests at once: the first is the
    // probe and waits behind the block; the others arrive while it is out.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let blocked = block_redis(&redis, "0.15");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let url = a.url("/");
        tasks.push(tokio::spawn(async move {
            send(client().get(url).header("X-Api-Key", format!("fresh-{i}"))).await
        }));
    }
    let mut fallback = 0;
    for t in tasks {
        let r = t.await.unwrap();
        assert_eq!(r.status, 200);
        if r.has("sluice-fallback") {
            fallback += 1;
        }
    }
    blocked.join().unwrap();
    assert_eq!(
        fallback,
        0,
        "requests fell back while the probe was out; log:\n{}",
        a.log()
    );
}
