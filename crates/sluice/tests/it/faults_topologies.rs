//! The single node's faults (`redis_degradation`) on the other topologies:
//! Redis Cluster, Sentinel (`redis+sentinel://`) and shards
//! (`redis+shards://`). One scenario runs on each:
//!
//! 1. **Scripts flushed**: `SCRIPT FLUSH` on every node that holds Sluice's
//!    keys. The script is loaded again and Redis decides every request, on
//!    an instance with a generous timeout (2 s): no fallback.
//! 2. **A node paused**: `CLIENT PAUSE … WRITE` on one node (the master
//!    behind Sentinel) under a bounded load. It holds script calls but
//!    answers `PING` and the Cluster bus, so nothing fails it over. Calls to
//!    it time out (counted as timeouts) and the `local` fallback answers;
//!    after `CLIENT UNPAUSE`, Redis decides again.
//! 3. **A node killed** (SIGKILL) under the load: a Cluster primary without
//!    a replica, a shard, or, behind Sentinel, the replica and then the
//!    master (the whole backend: nothing to fail over to). The fallback
//!    answers; once the node is restarted (empty), Redis decides again and
//!    `/v1/status` shows the breaker closed.
//!
//! The guards are hang guards, not timings: every answer is a 200 or a 429
//! (what the `local` fallback gives: no 5xx, no dropped connection), none
//! takes longer than [`HANG_GUARD`], twenty times the store timeout, and
//! the instance never panics.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::faults::{self, Load, Sample, StoreMetrics, wait_redis_decides};
use common::{Sluice, client, send};
use sluice_testkit::resp;
use sluice_testkit::{RedisCluster, RedisServer, SentinelSetup, require_redis};

/// The store timeout of the instance that goes through the pause and the
/// kill: far below a paused node, far above a healthy round trip.
const TIMEOUT: Duration = Duration::from_millis(100);

/// The longest a request may take: a hang guard, twenty times [`TIMEOUT`].
const HANG_GUARD: Duration = Duration::from_secs(2);

/// How long a fault lasts under the load.
const FAULT: Duration = Duration::from_millis(1500);

/// How long the load runs before a fault, and on after it ends.
const AROUND: Duration = Duration::from_millis(300);

/// A hang guard for Redis to decide again.
const RECOVERY: Duration = Duration::from_secs(30);

/// A Redis deployment, as the scenario needs it.
trait Deployment {
    /// The store URL.
    fn url(&self) -> String;
    /// The nodes that hold Sluice's keys and scripts; the first is paused.
    fn data_nodes(&self) -> Vec<SocketAddr>;
    /// Kills one node, or the whole backend (SIGKILL).
    fn kill(&mut self);
    /// Starts what [`Self::kill`] killed again, empty, and waits until it
    /// serves.
    fn restart(&mut self);
}

/// Three primaries without replicas: a killed one has no stand-in.
impl Deployment for RedisCluster {
    fn url(&self) -> String {
        RedisCluster::url(self)
    }
    fn data_nodes(&self) -> Vec<SocketAddr> {
        (0..self.len()).map(|i| self.node(i).addr()).collect()
    }
    fn kill(&mut self) {
        RedisCluster::kill(self, 0);
    }
    fn restart(&mut self) {
        RedisCluster::restart(self, 0);
        self.wait_healthy();
    }
}

/// Independent shards (`redis+shards://`).
struct Shards(Vec<RedisServer>);

impl Deployment for Shards {
    fn url(&self) -> String {
        let hosts: Vec<String> = self.0.iter().map(|s| s.addr().to_string()).collect();
        format!("redis+shards://{}", hosts.join(","))
    }
    fn data_nodes(&self) -> Vec<SocketAddr> {
        self.0.iter().map(RedisServer::addr).collect()
    }
    fn kill(&mut self) {
        self.0[0].kill();
    }
    fn restart(&mut self) {
        self.0[0].restart();
    }
}

/// A master, its replica and three Sentinels; the whole backend is killed.
impl Deployment for SentinelSetup {
    fn url(&self) -> String {
        SentinelSetup::url(self)
    }
    fn data_nodes(&self) -> Vec<SocketAddr> {
        vec![self.master().addr()]
    }
    fn kill(&mut self) {
        self.kill_replica();
        self.kill_master();
    }
    fn restart(&mut self) {
        self.restart_master();
    }
}

/// What a fault does to a node.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `CLIENT PAUSE` (writes and scripts) on the first data node.
    Pause,
    /// [`Deployment::kill`].
    Kill,
}

impl Fault {
    fn begin(self, d: &mut impl Deployment) {
        match self {
            Self::Pause => expect_ok(d.data_nodes()[0], &["CLIENT", "PAUSE", "20000", "WRITE"]),
            Self::Kill => d.kill(),
        }
    }

    fn end(self, d: &mut impl Deployment) {
        match self {
            Self::Pause => expect_ok(d.data_nodes()[0], &["CLIENT", "UNPAUSE"]),
            Self::Kill => d.restart(),
        }
    }
}

fn expect_ok(node: SocketAddr, args: &[&str]) {
    let reply = resp::command(node, args).unwrap_or_else(|e| panic!("{node}: {args:?}: {e}"));
    assert!(reply.is_ok(), "{node}: {args:?}: {reply:?}");
}

/// `number_of_cached_scripts` of `INFO memory`.
fn cached_scripts(node: SocketAddr) -> u64 {
    let info = resp::command(node, &["INFO", "memory"]).expect("INFO memory");
    info.text()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("number_of_cached_scripts:"))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{node}: no number_of_cached_scripts in {info:?}"))
}

/// Sends `n` requests with fresh keys; Redis must decide every one.
async fn redis_decides_fresh_keys(sluice: &Sluice, label: &str, n: usize) {
    let c = client();
    for i in 0..n {
        let key = format!("{label}-{i}");
        let r = send(c.get(sluice.url("/")).header("X-Api-Key", key)).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert!(!r.has("sluice-fallback"), "the fallback decided: {r:?}");
    }
}

/// `SCRIPT FLUSH` on every data node: the script is loaded again, and no
/// request falls back.
async fn a_flushed_script_is_reloaded(d: &impl Deployment, patient: &Sluice) {
    redis_decides_fresh_keys(patient, "before-flush", 12).await;
    let nodes = d.data_nodes();
    for &node in &nodes {
        expect_ok(node, &["SCRIPT", "FLUSH"]);
        assert_eq!(cached_scripts(node), 0, "{node}: flushed");
    }
    redis_decides_fresh_keys(patient, "after-flush", 12).await;
    let reloaded: u64 = nodes.iter().map(|&n| cached_scripts(n)).sum();
    assert!(reloaded >= 1, "the script was loaded again");
}

/// Runs `fault` under a bounded load on `fast`, then checks the guards:
/// only 200s and 429s, none slower than [`HANG_GUARD`], the fallback
/// answered during the fault, and Redis decides again afterwards with the
/// breaker closed. Returns the instance's store counters over the fault.
async fn under_load(fast: &Arc<Sluice>, d: &mut impl Deployment, fault: Fault) -> StoreMetrics {
    let before = StoreMetrics::of(fast).await;
    let load = Load::start(std::slice::from_ref(fast), faults::CLIENTS);
    tokio::time::sleep(AROUND).await;
    let onset = Instant::now();
    tokio::task::block_in_place(|| fault.begin(d));
    tokio::time::sleep(FAULT).await;
    let cleared = Instant::now();
    tokio::task::block_in_place(|| fault.end(d));
    tokio::time::sleep(AROUND).await;
    let samples = load.stop().await;
    let metrics = StoreMetrics::of(fast).await - before;
    let all: Vec<&Sample> = samples.iter().collect();
    eprintln!(
        "{fault:?}: {} requests; {}; counters {metrics:?}",
        all.len(),
        faults::phases(&all, onset, cleared)
    );
    let bad: Vec<&Sample> = samples
        .iter()
        .filter(|s| !s.documented() || s.took > HANG_GUARD)
        .collect();
    assert!(
        bad.is_empty(),
        "{fault:?}: {} answers other than 200/429 or slower than {HANG_GUARD:?}: {:?}\nlog:\n{}",
        bad.len(),
        &bad[..bad.len().min(10)],
        fast.log()
    );
    let during = |s: &&Sample| s.sent >= onset && s.sent < cleared;
    assert!(
        samples.iter().filter(during).any(Sample::fallback),
        "{fault:?}: the fallback never answered during the fault"
    );
    let took = wait_redis_decides(fast, RECOVERY).await;
    eprintln!("{fault:?}: Redis decided again after {took:?} of polling");
    let status = send(client().get(fast.control_url("/v1/status")))
        .await
        .json();
    assert_eq!(status["store"]["kind"], "redis", "{status}");
    assert_eq!(status["store"]["breaker"], "closed", "{status}");
    metrics
}

/// The scenario: scripts flushed, a node paused, a node killed.
async fn flush_pause_and_kill(label: &str, d: &mut impl Deployment) {
    let url = d.url();
    let patient = faults::start(&format!("{label}-patient"), &url, faults::PAIR_TIMEOUT);
    let fast = faults::start(&format!("{label}-fast"), &url, TIMEOUT);
    wait_redis_decides(&patient, RECOVERY).await;
    wait_redis_decides(&fast, RECOVERY).await;

    a_flushed_script_is_reloaded(d, &patient).await;
    drop(patient);

    let paused = under_load(&fast, d, Fault::Pause).await;
    assert!(paused.timeouts > 0, "calls to the paused node timed out");
    let killed = under_load(&fast, d, Fault::Kill).await;
    assert!(
        killed.fallback > 0,
        "the fallback decided while it was down"
    );

    let log = fast.log();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "{label}: {} lines of the log say the master could not be re-resolved",
        log.matches("cannot re-resolve the Redis master").count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_under_flush_pause_and_kill() {
    if !require_redis() {
        return;
    }
    let mut cluster = RedisCluster::start(3);
    flush_pause_and_kill("topology-cluster", &mut cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_under_flush_pause_and_kill() {
    if !require_redis() {
        return;
    }
    let mut shards = Shards((0..3).map(|_| RedisServer::start()).collect());
    flush_pause_and_kill("topology-shards", &mut shards).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_under_flush_pause_and_kill() {
    if !require_redis() {
        return;
    }
    // Sentinel fails a master over when it has not answered for this long:
    // far above the pause, so the pause is only a pause.
    let down_after = Duration::from_secs(10);
    let mut sentinel = SentinelSetup::start_with_down_after("sluice-faults", down_after);
    flush_pause_and_kill("topology-sentinel", &mut sentinel).await;
}
