//! Faults on the network between Sluice and Redis, under a bounded load:
//! 50 ms and 200 ms of added round-trip latency (a delaying TCP proxy in
//! the test, 25 or 100 ms each way), and 5 % packet loss (Redis in a
//! network namespace of the test's own, an nftables rule dropping 5 % of
//! the packets each way at random: this kernel has no `sch_netem`).
//!
//! Each test runs instances on the faulty link: one with the default store
//! timeout (10 ms), where every call slower than that is decided by the
//! fallback; one with a timeout above the fault (300 ms, 500 ms), where
//! Redis still decides most; and a pair with 2 s, for the two-instance
//! exactness check afterwards. The guards: every answer is a 200 or a 429
//! (the `local` fallback's), none takes longer than its timeout plus a
//! margin (plus what a control on the memory store took meanwhile: see
//! `common::faults`); after the fault, Redis decides again everywhere and
//! the pair passes the exactness check. Each test prints a `fault
//! summary:` line per timeout (docs/faults.md collects them).
//!
//! Latency is tested against a single node and against a Cluster: there,
//! the client learns the nodes' addresses from `CLUSTER SLOTS` and
//! `MOVED`, so each node announces its own proxy's port. Loss is tested
//! against a single node in the namespace (a whole Cluster in it would
//! test the same TCP retransmissions). The Cluster's own faults are in
//! `faults_cluster`.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::faults::{DEFAULT_TIMEOUT, DelayProxy, EXACT_KEYS, Instances, PAIR_TIMEOUT, Sample};
use sluice_testkit::redis_server::wait_until;
use sluice_testkit::resp::Reply;
use sluice_testkit::{RedisCluster, RedisServer, require_netns, require_redis};

/// Added round-trip latency `rtt` for three seconds, under load, on the
/// store at `url`, through the proxies that `set_delay` sets (each way).
async fn latency(fault: &str, url: &str, rtt: Duration, set_delay: &dyn Fn(Duration)) {
    let above = Duration::from_millis(300);
    assert!(above > rtt);
    let instances = Instances::start("faults-latency", url, &[DEFAULT_TIMEOUT, above]);
    instances.wait_redis_decides(Duration::from_secs(20)).await;

    let running = instances.start_load().await;
    set_delay(rtt / 2);
    let onset = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    set_delay(Duration::ZERO);
    let cleared = Instant::now();
    let run = instances.finish(running, fault, onset, cleared).await;

    // A request sent and answered while the delay was in force had any
    // Redis call of its own delayed by the whole round trip.
    let within = |s: &&Sample| s.sent >= onset && s.sent + s.took <= cleared;
    let default: Vec<&Sample> = run.at(DEFAULT_TIMEOUT).into_iter().filter(within).collect();
    assert!(!default.is_empty());
    // At the default 10 ms, every call timed out: the fallback decided.
    assert!(
        default.iter().all(|s| s.fallback()),
        "{fault}: at {DEFAULT_TIMEOUT:?}, Redis decided a request: {:?}",
        default.iter().find(|s| !s.fallback())
    );
    // Above the latency, Redis still decides, and its answers show the
    // delay (a check that the fault was really there).
    for timeout in [above, PAIR_TIMEOUT] {
        let sent: Vec<&Sample> = run.at(timeout).into_iter().filter(within).collect();
        let redis: Vec<&&Sample> = sent.iter().filter(|s| !s.fallback()).collect();
        eprintln!(
            "{fault}: at {timeout:?}, Redis decided {} of the {} requests sent and answered under the delay",
            redis.len(),
            sent.len()
        );
        assert!(
            !redis.is_empty(),
            "{fault}: at {timeout:?}, Redis decided nothing"
        );
        assert!(
            redis.iter().all(|s| s.took >= rtt),
            "{fault}: a request decided by Redis took less than the round trip: {:?}",
            redis.iter().find(|s| s.took < rtt)
        );
    }

    instances
        .recover_and_check_exactness(EXACT_KEYS[0], Duration::from_secs(20))
        .await;
}

/// Added latency between Sluice and one Redis node.
async fn latency_to_one_node(rtt: Duration) {
    let redis = RedisServer::start();
    let proxy = DelayProxy::start(redis.addr());
    let fault = format!("latency {} ms", rtt.as_millis());
    latency(&fault, &proxy.url(), rtt, &|d| proxy.set_delay(d)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_50ms_between_sluice_and_redis() {
    if !require_redis() {
        return;
    }
    latency_to_one_node(Duration::from_millis(50)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_200ms_between_sluice_and_redis() {
    if !require_redis() {
        return;
    }
    latency_to_one_node(Duration::from_millis(200)).await;
}

/// 50 ms of added round trip between Sluice and every node of a Redis
/// Cluster (three primaries). Each node gets a delaying proxy of its own
/// and announces the proxy's port (`cluster-announce-port`), so that the
/// slot map and `MOVED` replies send the client through the proxies too.
/// The cluster bus between the nodes is not delayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn latency_50ms_between_sluice_and_a_cluster() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let proxies: Vec<DelayProxy> = (0..cluster.len())
        .map(|i| DelayProxy::start(cluster.node(i).addr()))
        .collect();
    for (i, proxy) in proxies.iter().enumerate() {
        let port = proxy.addr.port().to_string();
        let reply = cluster.command(i, &["CONFIG", "SET", "cluster-announce-port", &port]);
        assert!(reply.is_ok(), "{reply:?}");
    }
    let ports: BTreeSet<i64> = proxies.iter().map(|p| i64::from(p.addr.port())).collect();
    wait_until(
        "every node announces its proxy",
        Duration::from_secs(30),
        || (0..cluster.len()).all(|i| primary_ports(&cluster, i).is_subset(&ports)),
    );
    let seeds: Vec<String> = proxies.iter().map(|p| p.addr.to_string()).collect();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let set_delay = |d: Duration| proxies.iter().for_each(|p| p.set_delay(d));
    latency(
        "latency 50 ms, Cluster",
        &url,
        Duration::from_millis(50),
        &set_delay,
    )
    .await;
}

/// The client ports of the primaries in node `i`'s `CLUSTER SLOTS`.
fn primary_ports(cluster: &RedisCluster, i: usize) -> BTreeSet<i64> {
    let Reply::Array(Some(ranges)) = cluster.command(i, &["CLUSTER", "SLOTS"]) else {
        return BTreeSet::new();
    };
    ranges
        .iter()
        .filter_map(|range| match range {
            Reply::Array(Some(items)) => match items.get(2) {
                Some(Reply::Array(Some(primary))) => match primary.get(1) {
                    Some(Reply::Int(port)) => Some(*port),
                    _ => None,
                },
                _ => None,
            },
            _ => None,
        })
        .collect()
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
    // Above one retransmission timeout (200 ms at least), with room for a
    // second.
    let above = Duration::from_millis(500);
    let instances = Instances::start("faults-loss", &url, &[DEFAULT_TIMEOUT, above]);
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
