//! Every node a topology uses is asked for its `maxmemory-policy` and
//! `evicted_keys`: each shard, every Cluster master, and the master the
//! Sentinels name. Real `redis-server` processes.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sluice_redis::StoreUrl;
use sluice_redis::eviction::{EvictionWatch, NodeReading, Phase, read_nodes};
use sluice_redis::topology::Topology;
use sluice_testkit::{RedisCluster, RedisServer, SentinelSetup, require_redis};

use crate::common::shard_hosts;

async fn connect(url: &str) -> Topology {
    let url = StoreUrl::parse_with_env(url, |_| None).unwrap();
    tokio::time::timeout(Duration::from_secs(30), Topology::connect(&url))
        .await
        .unwrap()
        .unwrap()
}

/// The policy read of `node`, which must have answered.
fn policy_of<'a>(readings: &'a [NodeReading], node: &str) -> &'a str {
    let r = readings
        .iter()
        .find(|r| r.node == node)
        .unwrap_or_else(|| panic!("{node} was not read: {readings:?}"));
    let fields = r.fields.as_ref().unwrap();
    assert_eq!(fields.evicted_keys, Some(0), "{readings:?}");
    fields.policy.as_deref().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shard_is_read_and_an_evicting_one_is_named() {
    if !require_redis() {
        return;
    }
    let servers = [
        RedisServer::start_with(&["--maxmemory-policy", "noeviction"]),
        RedisServer::start_with(&["--maxmemory-policy", "allkeys-lfu"]),
    ];
    let topology = connect(&format!("redis+shards://{}", shard_hosts(&servers))).await;
    let readings = read_nodes(&topology).await;
    assert_eq!(readings.len(), 2, "{readings:?}");
    let names: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    assert_eq!(policy_of(&readings, &names[0]), "noeviction");
    assert_eq!(policy_of(&readings, &names[1]), "allkeys-lfu");
    let watch = EvictionWatch::default();
    let refused = watch.record(readings, false, Phase::Start).unwrap_err();
    assert_eq!(refused.node, names[1]);
    assert_eq!(watch.nodes().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cluster_master_is_read() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let changed = cluster.command(2, &["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    assert!(changed.is_ok(), "{changed:?}");
    let topology = connect(&cluster.url()).await;
    let readings = read_nodes(&topology).await;
    assert_eq!(readings.len(), 3, "{readings:?}");
    for i in 0..3 {
        let node = cluster.node(i).addr().to_string();
        let expected = if i == 2 { "volatile-ttl" } else { "noeviction" };
        assert_eq!(policy_of(&readings, &node), expected);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sentinel_master_is_read() {
    if !require_redis() {
        return;
    }
    let setup = SentinelSetup::start("sluice-eviction");
    let changed = setup
        .master()
        .command(&["CONFIG", "SET", "maxmemory-policy", "allkeys-random"])
        .unwrap();
    assert!(changed.starts_with("+OK"), "{changed}");
    let topology = connect(&setup.url()).await;
    let readings = read_nodes(&topology).await;
    assert_eq!(readings.len(), 1, "{readings:?}");
    let master = format!("127.0.0.1:{}", setup.master().port());
    assert_eq!(policy_of(&readings, &master), "allkeys-random");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_refuses_info_is_an_error_of_its_own() {
    if !require_redis() {
        return;
    }
    // `INFO` renamed away, as some managed Redis services do with commands.
    let server = RedisServer::start_with(&["--rename-command", "INFO", "\"\""]);
    let topology = connect(&server.url()).await;
    let readings = read_nodes(&topology).await;
    assert_eq!(readings.len(), 1);
    assert!(readings[0].fields.is_err(), "{readings:?}");
    let watch = EvictionWatch::default();
    assert!(watch.record(readings, false, Phase::Start).is_ok());
    assert_eq!(watch.nodes()[0].policy, None);
}
