//! The store over real topologies: a single node, shards on three
//! `redis-server` processes, and a three-node Redis Cluster. Requests over
//! client keys on different nodes (or slots) commit in turn and refund on
//! a refusal; concurrent requests are batched per node.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sluice_core::{AlgorithmKind, LimitSpec, Limiter, Rate};
use sluice_redis::topology::Topology;
use sluice_redis::{RedisCheck, RedisStore, StoreUrl};
use sluice_store::KeyId;
use sluice_testkit::{RedisCluster, RedisServer, require_redis};

const MINUTE: u64 = 60_000_000_000;

fn limiter(algorithm: AlgorithmKind, burst: u64) -> Limiter {
    LimitSpec {
        algorithm,
        rate: Rate::new(1, MINUTE).unwrap(),
        burst,
        nodelay: false,
    }
    .build()
    .unwrap()
}

async fn connect(url: &str) -> Topology {
    let url = StoreUrl::parse_with_env(url, |_| None).unwrap();
    tokio::time::timeout(Duration::from_secs(30), Topology::connect(&url))
        .await
        .unwrap()
        .unwrap()
}

/// Two client keys whose hash tags the topology places apart (different
/// nodes, or in Cluster mode simply two slots).
fn two_keys_apart(topology: &Topology) -> (KeyId, KeyId) {
    let first = KeyId(1);
    let node = topology.node_of(&first.to_hex());
    let second = (2..1000u128)
        .map(KeyId)
        .find(|k| node.is_none() || topology.node_of(&k.to_hex()) != node)
        .unwrap_or(KeyId(2)); // one node: any other key
    (first, second)
}

/// A request over two client keys: the refusal of the second refunds the
/// first.
async fn refused_requests_charge_nothing_across_nodes(store: &RedisStore, topology: &Topology) {
    let (k1, k2) = two_keys_apart(topology);
    let roomy = limiter(AlgorithmKind::SlidingWindow, 10);
    let tight = limiter(AlgorithmKind::TokenBucket, 1);
    for (round, (first, second)) in [(k1, k2), (k2, k1)].into_iter().enumerate() {
        let (a, b) = (format!("roomy-{round}"), format!("tight-{round}"));
        let both = [
            RedisCheck {
                limit_id: &a,
                limiter: &roomy,
                key: first,
                cost: 3,
                reserve: 0,
            },
            RedisCheck {
                limit_id: &b,
                limiter: &tight,
                key: second,
                cost: 1,
                reserve: 0,
            },
        ];
        let ok = store.check(&both).await.unwrap();
        assert!(ok.allowed);
        assert_eq!(ok.decisions[0].remaining, 7);
        let refused = store.check(&both).await.unwrap();
        assert!(!refused.allowed);
        assert!(refused.decisions[0].allowed, "{refused:?}");
        assert_eq!(refused.decisions[0].remaining, 7);
        assert!(!refused.decisions[1].allowed);
        let peek = [RedisCheck { cost: 0, ..both[0] }];
        let peek = store.check(&peek).await.unwrap();
        assert_eq!(peek.decisions[0].remaining, 7, "the refund restored it");
    }
}

/// 400 concurrent requests over 20 client keys (spread over the nodes),
/// burst 5 each: exactly 100 pass.
async fn concurrent_requests_admit_exactly_the_bursts(store: &RedisStore) {
    let l = limiter(AlgorithmKind::Gcra, 5);
    let mut tasks = Vec::new();
    for i in 0..400u128 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let check = RedisCheck {
                limit_id: "concurrent",
                limiter: &l,
                key: KeyId(1000 + i % 20),
                cost: 1,
                reserve: 0,
            };
            store.check(&[check]).await.unwrap().allowed
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += u32::from(t.await.unwrap());
    }
    assert_eq!(allowed, 100);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node() {
    if !require_redis() {
        return;
    }
    let server = RedisServer::start();
    let topology = connect(&server.url()).await;
    let store = RedisStore::new(topology.clone());
    refused_requests_charge_nothing_across_nodes(&store, &topology).await;
    concurrent_requests_admit_exactly_the_bursts(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards() {
    if !require_redis() {
        return;
    }
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let topology = connect(&format!(
        "redis+shards://{}",
        crate::common::shard_hosts(&servers)
    ))
    .await;
    let store = RedisStore::new(topology.clone());
    refused_requests_charge_nothing_across_nodes(&store, &topology).await;
    concurrent_requests_admit_exactly_the_bursts(&store).await;
    // Every node holds some of the state.
    for server in &servers {
        let size = server.command(&["DBSIZE"]).unwrap();
        assert_ne!(size.trim(), ":0", "a shard holds nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let topology = connect(&cluster.url()).await;
    let store = RedisStore::new(topology.clone());
    refused_requests_charge_nothing_across_nodes(&store, &topology).await;
    concurrent_requests_admit_exactly_the_bursts(&store).await;
    // Several limits of one client key share a slot: one atomic call.
    let (a, b) = (
        limiter(AlgorithmKind::FixedWindow, 2),
        limiter(AlgorithmKind::SlidingLog, 1),
    );
    let checks = [
        RedisCheck {
            limit_id: "fw",
            limiter: &a,
            key: KeyId(77),
            cost: 1,
            reserve: 0,
        },
        RedisCheck {
            limit_id: "log",
            limiter: &b,
            key: KeyId(77),
            cost: 1,
            reserve: 0,
        },
    ];
    assert!(store.check(&checks).await.unwrap().allowed);
    let refused = store.check(&checks).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.decisions[0].remaining, 1);
}

/// Concurrency slots on a Cluster: a slot taken together with a rate
/// limit of the same client key is given back by its holder's refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_slots_are_given_back_by_their_holder() {
    if !require_redis() {
        return;
    }
    let cluster = RedisCluster::start(3);
    let topology = connect(&cluster.url()).await;
    let a = RedisStore::new(topology.clone());
    let b = RedisStore::new(topology);
    let slots = limiter(AlgorithmKind::Concurrency, 1);
    let rate = limiter(AlgorithmKind::Gcra, 10);
    let take = [
        RedisCheck {
            limit_id: "rate",
            limiter: &rate,
            key: KeyId(9),
            cost: 1,
            reserve: 0,
        },
        RedisCheck {
            limit_id: "slots",
            limiter: &slots,
            key: KeyId(9),
            cost: 1,
            reserve: 0,
        },
    ];
    assert!(a.check(&take).await.unwrap().allowed);
    assert!(
        !b.check(&take).await.unwrap().allowed,
        "the one slot is held"
    );
    a.refund(&take[1..]).await.unwrap();
    assert!(b.check(&take).await.unwrap().allowed, "given back");
}
