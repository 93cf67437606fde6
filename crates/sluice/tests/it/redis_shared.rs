//! Limits shared in Redis: the quick-start config runs unchanged with
//! `--store-url redis://…`, two `sluice serve` processes enforce one limit
//! together, and the key names in Redis never contain a raw key.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::{Sluice, TempConfig, client, example, example_path, replace_once, send};
use sluice_testkit::redis_cluster::RedisCluster;
use sluice_testkit::redis_sentinel::SentinelSetup;
use sluice_testkit::{RedisServer, require_redis};

const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "test-secret-shared-by-both");

fn start_on(redis: &RedisServer, config: &std::path::Path) -> Sluice {
    start_url(&redis.url(), config)
}

fn start_url(url: &str, config: &std::path::Path) -> Sluice {
    Sluice::start_env(config, &["--store-url", url], &[SECRET])
}

/// The quick start's config with a generous store timeout, so that a busy
/// test machine never hands a request to the fallback.
fn quickstart_patient() -> String {
    replace_once(
        &example("quickstart.toml"),
        "[store]\n",
        "[store]\ntimeout = \"2s\"\n",
    )
}

/// Every key name in Redis (`KEYS *`, fine for a test-sized database).
fn redis_keys(redis: &RedisServer) -> Vec<String> {
    let raw = redis.command(&["KEYS", "*"]).unwrap();
    raw.lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn the_quickstart_config_runs_unchanged_on_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let sluice = start_on(&redis, &example_path("quickstart.toml"));
    let client = client();
    // Redis decides (allow the very first calls, which load the script, to
    // miss the quick start's 10 ms timeout on a busy machine).
    let started = std::time::Instant::now();
    loop {
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", "warm-up")).await;
        assert_eq!(r.status, 200);
        if !r.has("sluice-fallback") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "Redis never decided"
        );
    }
    let r = send(client.get(sluice.url("/")).header("X-Api-Key", "alice")).await;
    let fields = r.ratelimit();
    assert_eq!(common::sf_item(&fields, "free").param("r"), 19);
}

/// The quick start's limits, shared by two instances (with a generous
/// store timeout, so that a busy test machine never hands a request to the
/// fallback).
#[tokio::test]
async fn the_quickstart_config_shares_its_limits_through_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    // The free plan refills one token in 6 minutes, not 100 ms: a busy
    // machine spending more than that on the 20 requests would let the
    // 21st through.
    let text = replace_once(
        &quickstart_patient(),
        "rate = \"10/s\", burst = 20",
        "rate = \"10/h\", burst = 20",
    );
    let config = TempConfig::new("redis-quickstart-shared", &text);
    let a = start_on(&redis, config.path());
    let b = start_on(&redis, config.path());
    let client = client();
    let key = "alice-raw-api-key";

    // The free plan's burst of 20, spent half on each instance.
    for i in 0..20 {
        let s = if i % 2 == 0 { &a } else { &b };
        let r = send(client.get(s.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(
            r.status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert!(!r.has("sluice-fallback"), "decided by Redis");
    }
    // Both instances now refuse: the quota is one, not one per instance.
    for s in [&a, &b] {
        let r = send(client.get(s.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(r.status, 429);
        let fields = r.ratelimit();
        let free = common::sf_item(&fields, "free");
        assert_eq!(free.param("r"), 0);
        assert!(r.int_header("retry-after") >= 1);
    }

    let keys = redis_keys(&redis);
    assert!(!keys.is_empty());
    for k in &keys {
        assert!(k.starts_with("sluice:{"), "{k}");
        assert!(!k.contains("alice"), "a raw key reached Redis: {k}");
        let ttl = redis.command(&["PTTL", k]).unwrap();
        let ttl: i64 = ttl.trim_start_matches(':').trim().parse().unwrap();
        // -1 is a key without a TTL. A key whose short TTL ran out since
        // `KEYS` listed it answers 0 (under a millisecond left) or -2
        // (gone): both had one.
        assert!(ttl >= 0 || ttl == -2, "{k} has no TTL ({ttl})");
    }
}

/// One Redis node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_one_global_limit_on_one_node() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    two_instances_admit_exactly_one_global_limit(&redis.url()).await;
}

/// Redis Cluster (three primaries): the per-IP and per-key limits live in
/// different slots, so a refused request is refunded across nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_one_global_limit_on_a_cluster() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    two_instances_admit_exactly_one_global_limit(&cluster.url()).await;
}

/// Three independent shards, keys spread by consistent hashing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_one_global_limit_on_shards() {
    if !require_redis() {
        return;
    }
    let shards: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let hosts: Vec<String> = shards
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect();
    two_instances_admit_exactly_one_global_limit(&format!("redis+shards://{}", hosts.join(",")))
        .await;
}

/// A master and a replica behind three Sentinels.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_one_global_limit_behind_sentinel() {
    if !require_redis() {
        return;
    }
    let sentinel = SentinelSetup::start("sluice-exact");
    two_instances_admit_exactly_one_global_limit(&sentinel.url()).await;
}

/// Fifty clients, split over two instances, hammer one key of a token
/// bucket (50/s, burst 20) for about three seconds: the exactness check
/// ([`common::two_instances_admit_exactly`]).
async fn two_instances_admit_exactly_one_global_limit(url: &str) {
    let text = replace_once(
        &quickstart_patient(),
        r#"limits = [{ algorithm = "token_bucket", rate = "10/s", burst = 20 }]"#,
        r#"limits = [{ algorithm = "token_bucket", rate = "50/s", burst = 20 }]"#,
    );
    let config = TempConfig::new("redis-two-instances", &text);
    let a = Arc::new(start_url(url, config.path()));
    let b = Arc::new(start_url(url, config.path()));
    common::two_instances_admit_exactly(&a, &b, "shared", 50, 20).await;
}

/// Script calls Redis has run since its stats were reset.
fn script_calls(redis: &RedisServer) -> u64 {
    let stats = redis.command(&["INFO", "commandstats"]).unwrap();
    stats
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| l.split("calls=").nth(1))
        .filter_map(|v| v.split(',').next())
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// A flood of 200 requests from one key over its burst of 20: with the
/// over-limit cache, the refusals are answered locally until their retry
/// time; without it, every one is a Redis call. The same answers either way.
#[tokio::test]
async fn the_over_limit_cache_keeps_a_flood_off_redis() {
    if !require_redis() {
        return;
    }
    let mut calls = Vec::new();
    for cache in [true, false] {
        let redis = RedisServer::start();
        let text = replace_once(
            &example("quickstart.toml"),
            "[store]\n",
            &format!("[store]\ntimeout = \"2s\"\nover_limit_cache = {cache}\n"),
        );
        let config = TempConfig::new("redis-over-limit-cache", &text);
        let sluice = start_on(&redis, config.path());
        let client = client();
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", "warm")).await;
        assert_eq!(r.status, 200);
        assert!(
            redis
                .command(&["CONFIG", "RESETSTAT"])
                .unwrap()
                .starts_with("+OK")
        );
        let (mut admitted, mut refused) = (0, 0);
        for _ in 0..200 {
            let r = send(client.get(sluice.url("/")).header("X-Api-Key", "flood")).await;
            assert!(!r.has("sluice-fallback"));
            match r.status {
                200 => admitted += 1,
                429 => refused += 1,
                s => panic!("status {s}"),
            }
        }
        assert!(
            admitted >= 20 && refused > 100,
            "{admitted} admitted, {refused} refused"
        );
        calls.push(script_calls(&redis));
    }
    let (with, without) = (calls[0], calls[1]);
    eprintln!("Redis script calls for 200 requests: {with} with the cache, {without} without");
    assert!(without >= 200, "{without}");
    assert!(
        with * 4 < without,
        "the cache saved too little: {with} against {without}"
    );
}

/// Changing a key's plan on a Redis store carries its used quota over, as
/// on the memory store: a free key (burst 20) that used 15 moves to pro
/// (burst 300) having used about three quarters of it.
#[tokio::test]
async fn a_plan_change_carries_used_quota_over_in_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    // The plans refill per hour, not per second: on a slow machine the
    // requests and the plan change take long enough for a per-second
    // bucket to refill past the bounds below.
    let text = replace_once(
        &replace_once(
            &quickstart_patient(),
            "rate = \"10/s\", burst = 20",
            "rate = \"10/h\", burst = 20",
        ),
        "rate = \"100/s\", burst = 300",
        "rate = \"100/h\", burst = 300",
    );
    let config = TempConfig::new("redis-carry-over", &text);
    let sluice = Sluice::start_env(
        config.path(),
        &["--store-url", &redis.url()],
        &[
            ("SLUICE_KEY_SECRET", "carry"),
            ("SLUICE_ADMIN_TOKEN", "t0ken"),
        ],
    );
    let client = client();
    for _ in 0..15 {
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", "carol")).await;
        assert_eq!(r.status, 200);
        assert!(!r.has("sluice-fallback"));
    }
    let r = send(
        client
            .put(sluice.control_url("/admin/keys/carol/plan"))
            .bearer_auth("t0ken")
            .header("content-type", "application/json")
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert!(r.status == 200 || r.status == 204, "{r:?}");

    let r = send(client.get(sluice.url("/")).header("X-Api-Key", "carol")).await;
    assert_eq!(r.status, 200);
    let fields = r.ratelimit();
    let left = common::sf_item(&fields, "pro").param("r");
    // 15 of 20 used is 225 of 300; minus this request, 74. A fresh pro
    // bucket would say 299.
    assert!((60..=100).contains(&left), "pro remaining {left}");
}
