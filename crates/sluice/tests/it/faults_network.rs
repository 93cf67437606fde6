//! Faults on the network between Sluice and Redis, under a bounded load:
//! 50 ms and 200 ms of added round-trip latency (a delaying TCP proxy in
//! the test, 25 or 100 ms each way), and 5 % packet loss (Redis in a
//! network namespace of the test's own, an nftables rule dropping 5 % of
//! the packets each way at random: this kernel has no `sch_netem`).
//!
//! Each test runs three instances on the faulty link: one with the default
//! store timeout (10 ms), where every call slower than that is decided by
//! the fallback, and a pair with a timeout above the fault, where Redis
//! still decides. The guards: every answer is a 200 or a 429 (the `local`
//! fallback's), none takes longer than the timeout plus a margin; after
//! the fault, Redis decides again on all three and the pair passes the
//! two-instance exactness check. Each prints a `fault summary:` line per
//! timeout (docs/faults.md collects them).
//!
//! These run against a single Redis node: for Cluster, the client learns
//! the nodes' own addresses from `CLUSTER SLOTS` and `MOVED`, and would go
//! around the proxy. The Cluster faults are in `faults_cluster`.

use crate::common;

use std::time::{Duration, Instant};

use common::faults::{DEFAULT_TIMEOUT, DelayProxy, EXACT_KEYS, Instances, Sample};
use sluice_testkit::{RedisServer, require_netns, require_redis};

/// Added round-trip latency `rtt` for three seconds, under load.
async fn latency(rtt: Duration) {
    let fault = format!("latency {} ms", rtt.as_millis());
    let redis = RedisServer::start();
    let proxy = DelayProxy::start(redis.addr());
    let url = proxy.url();
    let patient = Duration::from_millis(300);
    assert!(patient > rtt);
    let instances = Instances::start("faults-latency", &url, patient);
    instances.wait_redis_decides(Duration::from_secs(20)).await;

    let running = instances.start_load().await;
    proxy.set_delay(rtt / 2);
    let onset = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.set_delay(Duration::ZERO);
    let cleared = Instant::now();
    let samples = instances.finish(running, &fault, onset, cleared).await;

    // A request sent and answered while the delay was in force had any
    // Redis call of its own delayed by the whole round trip.
    let within = |s: &Sample| s.sent >= onset && s.sent + s.took <= cleared;
    let (default, pair) = Instances::split(&samples);
    let default_within: Vec<&Sample> = default.iter().copied().filter(|s| within(s)).collect();
    assert!(!default_within.is_empty());
    // At the default 10 ms, every call timed out: the fallback decided.
    assert!(
        default_within.iter().all(|s| s.fallback()),
        "{fault}: at {DEFAULT_TIMEOUT:?}, Redis decided a request: {:?}",
        default_within.iter().find(|s| !s.fallback())
    );
    // Above the latency, Redis still decides, and its answers show the
    // delay (a check that the fault was really there).
    let pair_within: Vec<&Sample> = pair.iter().copied().filter(|s| within(s)).collect();
    let redis_decided: Vec<&Sample> = pair_within
        .iter()
        .copied()
        .filter(|s| !s.fallback())
        .collect();
    assert!(
        !redis_decided.is_empty(),
        "{fault}: at {patient:?}, Redis decided nothing"
    );
    assert!(
        redis_decided.iter().all(|s| s.took >= rtt),
        "{fault}: a request decided by Redis took less than the round trip: {:?}",
        redis_decided.iter().find(|s| s.took < rtt)
    );
    eprintln!(
        "{fault}: at {patient:?}, Redis decided {} of {} requests sent and answered under the delay",
        redis_decided.len(),
        pair_within.len()
    );

    instances
        .recover_and_check_exactness(EXACT_KEYS[0], Duration::from_secs(20))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_50ms_between_sluice_and_redis() {
    if !require_redis() {
        return;
    }
    latency(Duration::from_millis(50)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_200ms_between_sluice_and_redis() {
    if !require_redis() {
        return;
    }
    latency(Duration::from_millis(200)).await;
}

/// 5 % of the packets between Sluice and Redis dropped, each way, for four
/// seconds, under load. Lost segments cost TCP a retransmission (200 ms at
/// least on Linux), during which the calls behind them on the connection
/// wait too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn packet_loss_5_percent_between_sluice_and_redis() {
    if !require_redis() {
        return;
    }
    let Some(ns) = require_netns() else {
        return;
    };
    let fault = "packet loss 5 %";
    let redis = ns.start_redis(&[]);
    let url = redis.url();
    // Above one retransmission timeout, with room for a second.
    let patient = Duration::from_millis(500);
    let instances = Instances::start("faults-loss", &url, patient);
    instances.wait_redis_decides(Duration::from_secs(20)).await;

    let running = instances.start_load().await;
    ns.set_loss(5);
    let onset = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await;
    let dropped = ns.dropped_packets();
    ns.clear_loss();
    let cleared = Instant::now();
    eprintln!("{fault}: nftables dropped {dropped} packets");
    instances.finish(running, fault, onset, cleared).await;
    assert!(dropped > 0, "the loss rule dropped nothing");

    instances
        .recover_and_check_exactness(EXACT_KEYS[0], Duration::from_secs(20))
        .await;
    // Dropped in reverse order, also on a panic: the instances, Redis (in
    // the namespace), then the namespace.
}
