//! Redis Cluster: scripts through a route, and a `MOVED` redirection
//! followed after a slot migrates. A real cluster of three `redis-server`
//! processes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sluice_redis::StoreUrl;
use sluice_redis::topology::Topology;
use sluice_testkit::{RedisCluster, require_redis};

fn incr_script() -> redis::Script {
    redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_route_by_slot_and_follow_a_migrated_slot() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let url = StoreUrl::parse_with_env(&cluster.url(), |_| None).unwrap();
    let topology = tokio::time::timeout(Duration::from_secs(30), Topology::connect(&url))
        .await
        .unwrap()
        .unwrap();

    // Tags on every node.
    let tags: Vec<String> = (0..30).map(|i| format!("{:032x}", i * 7919)).collect();
    let mut owners = std::collections::BTreeSet::new();
    for tag in &tags {
        assert_eq!(topology.node_of(tag), None);
        let key = format!("sluice:{{{tag}}}:x");
        let n: i64 = incr_script()
            .key(&key)
            .arg(1)
            .invoke_async(&mut topology.route(tag))
            .await
            .unwrap();
        assert_eq!(n, 1);
        // Two keys of one tag share a slot, so one script may touch both.
        let both: i64 =
            redis::Script::new("redis.call('INCR', KEYS[1]) return redis.call('INCR', KEYS[2])")
                .key(&key)
                .key(format!("sluice:{{{tag}}}:y"))
                .invoke_async(&mut topology.route(tag))
                .await
                .unwrap();
        assert_eq!(both, 1);
        owners.insert(cluster.owner_of(cluster.keyslot(&key), 0).unwrap());
    }
    assert_eq!(owners.len(), 3, "30 tags should cover all three nodes");

    // Move one tag's slot (with its keys) to another node behind the
    // client's back: the client's slot map is stale, the old owner answers
    // MOVED, the client follows it.
    let tag = &tags[0];
    let key = format!("sluice:{{{tag}}}:x");
    let slot = cluster.keyslot(&key);
    let from = cluster.owner_of(slot, 0).unwrap();
    let to = (from + 1) % cluster.len();
    cluster.migrate_slot(slot, to);
    let moved = cluster.node(from).command(&["GET", &key]).unwrap();
    assert!(moved.starts_with("-MOVED"), "old owner answers {moved}");

    let mut route = topology.route(tag);
    let n: i64 = incr_script()
        .key(&key)
        .arg(10)
        .invoke_async(&mut route)
        .await
        .unwrap();
    assert_eq!(n, 12, "the counter moved with its slot: 1 + 1 + 10");
    let there = cluster.node(to).command(&["GET", &key]).unwrap();
    assert!(there.contains("12"), "new owner holds {there}");
    // And again, with the refreshed slot map.
    let n: i64 = incr_script()
        .key(&key)
        .arg(1)
        .invoke_async(&mut route)
        .await
        .unwrap();
    assert_eq!(n, 13);
}
