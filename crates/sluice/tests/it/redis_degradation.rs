//! When Redis is down, slow, or has lost its scripts, Sluice keeps
//! answering: the configured fallback decides at once, marks its decisions
//! with `Sluice-Fallback`, and Redis takes over again when it is back.
//!
//! No timing assertions: the bounds below are hang guards, two orders of
//! magnitude above the configured timeout, and would only trip if a request
//! waited on a dead or blocked Redis.

use crate::common;

use std::time::{Duration, Instant};

use common::{Reply, Sluice, client, example, replace_once, send};
use sluice_testkit::{RedisServer, require_redis};

/// Far above the store timeout (20 ms here), far below a blocked Redis
/// (`DEBUG SLEEP 3`) or a connect timeout.
const HANG_GUARD: Duration = Duration::from_millis(1500);

fn config(fallback: &str) -> common::TempConfig {
    config_with(fallback, "20ms")
}

fn config_with(fallback: &str, timeout: &str) -> common::TempConfig {
    let text = replace_once(
        &example("quickstart.toml"),
        "[store]\nurl = \"memory://\"\n",
        &format!(
            "[store]\nurl = \"memory://\"\ntimeout = \"{timeout}\"\nfallback = \"{fallback}\"\nexpected_instances = 2\nbreaker_open = \"200ms\"\n"
        ),
    );
    common::TempConfig::new(&format!("redis-fallback-{fallback}"), &text)
}

fn start(redis: &RedisServer, config: &common::TempConfig) -> Sluice {
    Sluice::start_env(
        config.path(),
        &["--store-url", &redis.url()],
        &[("SLUICE_KEY_SECRET", "degradation-test")],
    )
}

/// Sends one request and checks it did not hang.
async fn timed(client: &reqwest::Client, sluice: &Sluice, key: &str) -> Reply {
    let started = Instant::now();
    let r = send(client.get(sluice.url("/")).header("X-Api-Key", key)).await;
    let took = started.elapsed();
    assert!(took < HANG_GUARD, "a request waited {took:?}");
    r
}

/// Polls until `done(reply)`, or panics after `within` (a hang guard).
async fn until(
    client: &reqwest::Client,
    sluice: &Sluice,
    key: &str,
    within: Duration,
    done: impl Fn(&Reply) -> bool,
) -> Duration {
    let started = Instant::now();
    loop {
        let r = timed(client, sluice, key).await;
        if done(&r) {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "not reached within {within:?}: last reply {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn redis_killed_then_restarted_local_fallback() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let cfg = config("local");
    let sluice = start(&redis, &cfg);
    let client = client();

    // Redis decides while it is up (the first calls, which load the
    // script, may miss the timeout on a busy machine).
    until(&client, &sluice, "k", Duration::from_secs(20), |r| {
        r.status == 200 && !r.has("sluice-fallback")
    })
    .await;

    // Load from 16 clients while Redis dies under it: every answer is a
    // 200 or a 429 (no 5xx), none hangs, and the fallback answers.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..16)
        .map(|i| {
            let (client, url, stop) = (client.clone(), sluice.url("/"), stop.clone());
            tokio::spawn(async move {
                let (mut fallback, mut answers) = (0u32, 0u32);
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let started = Instant::now();
                    let r = send(client.get(&url).header("X-Api-Key", format!("load-{i}"))).await;
                    let took = started.elapsed();
                    assert!(took < HANG_GUARD, "a request waited {took:?}");
                    assert!(r.status == 200 || r.status == 429, "{r:?}");
                    answers += 1;
                    fallback += u32::from(r.has("sluice-fallback"));
                }
                (answers, fallback)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis.kill();
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut fallback_under_load = 0;
    for task in load {
        let (answers, fallback) = task.await.unwrap();
        assert!(answers > 0);
        fallback_under_load += fallback;
    }
    assert!(fallback_under_load > 0, "the fallback answered under load");

    // The very next requests are decided by the local fallback.
    let mut fallback_seen = 0;
    for _ in 0..5 {
        let r = timed(&client, &sluice, "k2").await;
        assert!(r.status == 200 || r.status == 429, "{r:?}");
        if r.header("sluice-fallback") == "local" {
            fallback_seen += 1;
        }
    }
    assert!(fallback_seen >= 4, "fallback decided {fallback_seen} of 5");

    // The local fallback is the free plan's burst shared out over the two
    // expected instances: 10 of a fresh key's 20.
    let mut admitted = 0;
    for _ in 0..30 {
        if timed(&client, &sluice, "fresh").await.status == 200 {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 10, "local share of burst 20 over 2 instances");

    redis.restart();
    let took = until(&client, &sluice, "k3", Duration::from_secs(10), |r| {
        r.status == 200 && !r.has("sluice-fallback")
    })
    .await;
    eprintln!("Redis decided again {took:?} after its restart");
    // No reconnect storm: a handful of connections, not one per request.
    let stats = redis.command(&["INFO", "stats"]).unwrap();
    let connections: u64 = stats
        .lines()
        .find_map(|l| l.strip_prefix("total_connections_received:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap();
    assert!(
        connections <= 10,
        "{connections} connections after the restart"
    );
    let log = sluice.log();
    assert_eq!(
        log.matches("shared store failing").count(),
        1,
        "the outage is logged once:\n{log}"
    );
}

#[tokio::test]
async fn a_blocked_redis_times_out_to_the_fallback() {
    if !require_redis() {
        return;
    }
    // DEBUG is off by default since Redis 7.
    let redis = RedisServer::start_with(&["--enable-debug-command", "local"]);
    let cfg = config("local");
    let sluice = start(&redis, &cfg);
    let client = client();
    until(&client, &sluice, "k", Duration::from_secs(20), |r| {
        !r.has("sluice-fallback")
    })
    .await;

    // Block Redis for 3 s from another connection.
    let blocker = {
        let port = redis.port();
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            use std::io::{Read, Write};
            s.write_all(b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$1\r\n3\r\n")
                .unwrap();
            let mut buf = [0u8; 16];
            let _ = s.read(&mut buf);
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    for _ in 0..10 {
        let r = timed(&client, &sluice, "k").await;
        assert_eq!(r.header("sluice-fallback"), "local", "{r:?}");
    }
    blocker.join().unwrap();
    until(&client, &sluice, "k", Duration::from_secs(10), |r| {
        !r.has("sluice-fallback")
    })
    .await;
}

#[tokio::test]
async fn a_flushed_script_is_reloaded_without_a_fallback() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    // A generous timeout: reloading the script must not be mistaken for
    // an outage on a busy machine (the deny fallback would answer 503).
    let cfg = config_with("deny", "2s");
    let sluice = start(&redis, &cfg);
    let client = client();
    assert_eq!(timed(&client, &sluice, "k").await.status, 200);
    assert!(
        redis
            .command(&["SCRIPT", "FLUSH"])
            .unwrap()
            .starts_with("+OK")
    );
    let r = timed(&client, &sluice, "k").await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(!r.has("sluice-fallback"));
}

#[tokio::test]
async fn deny_answers_503_and_allow_admits_while_redis_is_down() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let (deny_cfg, allow_cfg) = (config("deny"), config("allow"));
    let deny = start(&redis, &deny_cfg);
    let allow = start(&redis, &allow_cfg);
    let client = client();
    redis.kill();

    for _ in 0..3 {
        let r = timed(&client, &deny, "k").await;
        assert_eq!(r.status, 503, "{r:?}");
        assert_eq!(r.header("sluice-fallback"), "deny");
        assert!(r.int_header("retry-after") >= 1);
        let body = r.json();
        assert_eq!(body["status"], 503, "{body}");
        assert!(
            r.header("content-type")
                .starts_with("application/problem+json")
        );
    }
    // The decision API answers as the data plane: 503, not 429 (a limit).
    let checked = send(
        client
            .post(deny.control_url("/v1/check"))
            .header("content-type", "application/json")
            .body(r#"{"path": "/", "headers": {"X-Api-Key": "k"}, "client_ip": "192.0.2.1"}"#),
    )
    .await;
    assert_eq!(checked.status, 503, "{checked:?}");
    assert_eq!(checked.json()["allowed"], false);
    // Far past any limit: allow admits them all.
    for _ in 0..40 {
        let r = timed(&client, &allow, "k").await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(r.header("sluice-fallback"), "allow");
    }
}

#[tokio::test]
async fn sluice_starts_on_the_fallback_when_redis_is_not_there_yet() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    redis.kill();
    let cfg = config("local");
    let sluice = start(&redis, &cfg);
    let client = client();
    let r = timed(&client, &sluice, "k").await;
    assert_eq!(r.header("sluice-fallback"), "local");
    redis.restart();
    until(&client, &sluice, "k", Duration::from_secs(10), |r| {
        !r.has("sluice-fallback")
    })
    .await;
}

/// A real Sentinel failover: the master is killed; while the Sentinels
/// elect the replica, the fallback decides; then Sluice finds the promoted
/// replica and Redis decides again.
#[tokio::test]
async fn a_sentinel_failover_is_followed() {
    if !require_redis() {
        return;
    }
    let mut sentinel = sluice_testkit::redis_sentinel::SentinelSetup::start("sluice-failover");
    let cfg = config("local");
    let sluice = Sluice::start_env(
        cfg.path(),
        &["--store-url", &sentinel.url()],
        &[("SLUICE_KEY_SECRET", "degradation-test")],
    );
    let client = client();
    until(&client, &sluice, "k", Duration::from_secs(20), |r| {
        !r.has("sluice-fallback")
    })
    .await;

    sentinel.kill_master();
    let r = timed(&client, &sluice, "k").await;
    assert_eq!(r.header("sluice-fallback"), "local", "{r:?}");
    let took = until(&client, &sluice, "k", Duration::from_secs(60), |r| {
        !r.has("sluice-fallback")
    })
    .await;
    eprintln!("Redis decided again {took:?} after the master was killed");
    let promoted = sentinel.replica().command(&["ROLE"]).unwrap();
    assert!(
        promoted.contains("master"),
        "the replica was promoted: {promoted}"
    );
}
