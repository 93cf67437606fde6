//! Faults under Redis Cluster, under a bounded load: a slot migration with
//! `redis-cli --cluster reshard`, a manual failover of a primary to its
//! replica (`CLUSTER FAILOVER`), and a primary killed (SIGKILL) until its
//! replica takes over.
//!
//! As in `faults_network`, several instances share the cluster: one with
//! the default store timeout (10 ms), one with 500 ms, and a pair with 2 s
//! (for the exactness check), besides a control on the memory store. The
//! guards:
//! every answer is a 200 or a 429 (the `local` fallback's), none takes
//! longer than the timeout plus a margin; after the fault, Redis decides
//! again on all three, and the pair passes the two-instance exactness check
//! on a key whose slot the fault moved: the instances must have followed
//! the new slot owner, and the bucket's state must have moved with it.

use crate::common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::faults::{DEFAULT_TIMEOUT, EXACT_BURST, EXACT_KEYS, Instances};
use common::{Sluice, client, send};
use sluice_testkit::resp::Reply;
use sluice_testkit::{RedisCluster, require_redis};

/// The timeouts of the single instances: the default, and one far above
/// a healthy cluster's round trip.
const TIMEOUTS: [Duration; 2] = [DEFAULT_TIMEOUT, Duration::from_millis(500)];

/// Every key on the cluster's live primaries.
fn all_keys(cluster: &RedisCluster) -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for i in cluster.live().filter(|&i| cluster.is_master(i)) {
        if let Reply::Array(Some(items)) = cluster.command(i, &["KEYS", "*"]) {
            keys.extend(items.iter().filter_map(|k| k.text().map(str::to_owned)));
        }
    }
    keys
}

/// The hash slot of the bucket that an exact-plan API key's requests use:
/// spends the key's burst (so that its Redis key outlives this search: it
/// expires when the bucket is full again), then looks for the new key.
/// Another instance may make a key at the same moment, and the bucket's may
/// still be there from before: the search is then made again once the
/// bucket is full, and only a key new each time is kept, until one is
/// left. The bucket is full again 400 ms after the last search.
async fn slot_of(cluster: &RedisCluster, sluice: &Sluice, api_key: &str) -> u16 {
    let c = client();
    let mut kept: Option<BTreeSet<String>> = None;
    for _ in 0..6 {
        let before = all_keys(cluster);
        for _ in 0..EXACT_BURST {
            let r = send(c.get(sluice.url("/")).header("X-Api-Key", api_key)).await;
            assert_eq!(r.status, 200, "{r:?}");
            assert!(!r.has("sluice-fallback"), "Redis decides: {r:?}");
        }
        let new: BTreeSet<String> = all_keys(cluster).difference(&before).cloned().collect();
        let left: BTreeSet<String> = match kept {
            None => new,
            Some(k) => k.intersection(&new).cloned().collect(),
        };
        if let [one] = Vec::from_iter(&left)[..] {
            return cluster.keyslot(one);
        }
        // None new (the bucket's key was there before) starts afresh.
        kept = (!left.is_empty()).then_some(left);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("no one new key for {api_key}: {kept:?}");
}

/// A live node that is not `but`, to ask about the cluster.
fn other_than(cluster: &RedisCluster, but: usize) -> usize {
    cluster
        .live()
        .find(|&i| i != but)
        .expect("another live node")
}

/// Moves the lowest slots of a primary to the next one with `redis-cli
/// --cluster reshard` while the load runs: up to and past the slot of an
/// exact key (of the eight, the one whose slot comes first in its
/// primary's range, to keep the reshard short), and 300 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slot_migration_with_redis_cli_reshard_under_load() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let instances = Instances::start("faults-reshard", &cluster.url(), &TIMEOUTS);
    instances.wait_redis_decides(Duration::from_secs(20)).await;

    let mut best: Option<(&str, u16, usize, u16)> = None;
    for key in EXACT_KEYS {
        let slot = slot_of(&cluster, &instances.a, key).await;
        let owner = cluster.owner_of(slot, 0).expect("an owner");
        let first = cluster.slots_of(owner, 0)[0].0;
        let offset = slot - first;
        if best.is_none_or(|(_, _, _, o)| offset < o) {
            best = Some((key, slot, owner, offset));
        }
    }
    let (key, slot, from, offset) = best.expect("a key");
    let to = (from + 1) % cluster.len();
    let owned: u16 = cluster
        .slots_of(from, 0)
        .iter()
        .map(|(a, b)| b - a + 1)
        .sum();
    let count = (offset + 1 + 300).min(owned);
    let fault = format!("reshard {count} slots");

    let running = instances.start_load().await;
    let first = slot - offset;
    let buckets: i64 = (first..first + count)
        .map(
            |s| match cluster.command(from, &["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]) {
                Reply::Int(n) => n,
                other => panic!("COUNTKEYSINSLOT: {other:?}"),
            },
        )
        .sum();
    let onset = Instant::now();
    tokio::task::block_in_place(|| cluster.reshard(from, to, count));
    let cleared = Instant::now();
    instances.finish(running, &fault, onset, cleared).await;
    eprintln!(
        "{fault}: redis-cli moved slots {first}..={} ({buckets} buckets when it began) in {:?}",
        first + count - 1,
        cleared - onset,
    );
    for i in 0..cluster.len() {
        assert_eq!(
            cluster.owner_of(slot, i),
            Some(to),
            "node {i} sees slot {slot} on node {to}"
        );
    }

    instances
        .recover_and_check_exactness(key, Duration::from_secs(20))
        .await;
}

/// A manual failover (`CLUSTER FAILOVER` on the replica) of the primary
/// that holds an exact key's bucket, in a cluster of three primaries with
/// a replica each.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_failing_over_to_its_replica_under_load() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start_with_replicas(3, 1);
    let instances = Instances::start("faults-failover", &cluster.url(), &TIMEOUTS);
    instances.wait_redis_decides(Duration::from_secs(20)).await;
    let key = EXACT_KEYS[0];
    let slot = slot_of(&cluster, &instances.a, key).await;
    let primary = cluster.owner_of(slot, 0).expect("an owner");
    let replica = cluster.replicas_of(primary)[0];
    let fault = "manual failover";

    let running = instances.start_load().await;
    let onset = Instant::now();
    tokio::task::block_in_place(|| cluster.failover(replica));
    let cleared = Instant::now();
    instances.finish(running, fault, onset, cleared).await;
    eprintln!("{fault}: the replica took over in {:?}", cleared - onset);
    assert!(cluster.is_master(replica));
    assert_eq!(cluster.master_of(primary), Some(replica), "roles swapped");
    assert_eq!(cluster.owner_of(slot, primary), Some(replica));

    instances
        .recover_and_check_exactness(key, Duration::from_secs(20))
        .await;
}

/// The primary that holds an exact key's bucket is killed (SIGKILL) under
/// load; after `cluster-node-timeout` (2 s) the others mark it failed and
/// its replica is elected in its place. It stays dead for the rest of the
/// test: the exactness check runs on the cluster without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_primary_killed_under_load_is_replaced_by_its_replica() {
    if !require_redis() {
        return;
    }
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let instances = Instances::start("faults-kill", &cluster.url(), &TIMEOUTS);
    instances.wait_redis_decides(Duration::from_secs(20)).await;
    let key = EXACT_KEYS[0];
    let slot = slot_of(&cluster, &instances.a, key).await;
    let primary = cluster.owner_of(slot, 0).expect("an owner");
    let replica = cluster.replicas_of(primary)[0];
    let fault = "primary killed";

    let running = instances.start_load().await;
    let onset = Instant::now();
    tokio::task::block_in_place(|| {
        cluster.kill(primary);
        cluster.wait_healthy();
    });
    let cleared = Instant::now();
    instances.finish(running, fault, onset, cleared).await;
    eprintln!("{fault}: the replica took over in {:?}", cleared - onset);
    let asked = other_than(&cluster, primary);
    assert!(cluster.is_master(replica));
    assert_eq!(cluster.owner_of(slot, asked), Some(replica));

    instances
        .recover_and_check_exactness(key, Duration::from_secs(30))
        .await;
}
