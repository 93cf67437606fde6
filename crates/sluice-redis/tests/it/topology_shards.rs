//! Shards: each tag's keys land on the node the ring picks. Real
//! `redis-server` processes.

#![allow(clippy::unwrap_used)]

use sluice_redis::StoreUrl;
use sluice_redis::topology::Topology;
use sluice_testkit::{RedisServer, require_redis};

use crate::common::shard_hosts;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_land_on_the_node_the_ring_picks() {
    if !require_redis() {
        return;
    }
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let url =
        StoreUrl::parse_with_env(&format!("redis+shards://{}", shard_hosts(&servers)), |_| {
            None
        })
        .unwrap();
    let topology = Topology::connect(&url).await.unwrap();
    let script = redis::Script::new("return redis.call('INCR', KEYS[1])");

    let tags: Vec<String> = (0..300).map(|i| format!("{i:032x}")).collect();
    let mut per_node = [0usize; 3];
    for tag in &tags {
        let n: i64 = script
            .key(format!("sluice:{{{tag}}}:x"))
            .invoke_async(&mut topology.route(tag))
            .await
            .unwrap();
        assert_eq!(n, 1);
        per_node[topology.node_of(tag).unwrap()] += 1;
    }
    for tag in &tags {
        let node = topology.node_of(tag).unwrap();
        for (i, server) in servers.iter().enumerate() {
            let exists = server
                .command(&["EXISTS", &format!("sluice:{{{tag}}}:x")])
                .unwrap();
            assert_eq!(
                exists.starts_with(":1"),
                i == node,
                "tag {tag}, server {i}: {exists}"
            );
        }
    }
    eprintln!("300 tags over 3 shards: {per_node:?}");
    eprintln!("{topology:?}");
    assert!(per_node.iter().all(|&n| n > 0), "{per_node:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_shard_fails_the_connect() {
    if !require_redis() {
        return;
    }
    let server = RedisServer::start();
    let url = StoreUrl::parse_with_env(
        &format!(
            "redis+shards://127.0.0.1:{},127.0.0.1:{}",
            server.port(),
            sluice_testkit::free_port()
        ),
        |_| None,
    )
    .unwrap();
    assert!(Topology::connect(&url).await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_never_shows_the_password() {
    if !require_redis() {
        return;
    }
    // (Set after start: the testkit's readiness probe does not log in.)
    let servers: Vec<RedisServer> = (0..2).map(|_| RedisServer::start()).collect();
    for s in &servers {
        let ok = s
            .command(&["CONFIG", "SET", "requirepass", "hunter2"])
            .unwrap();
        assert!(ok.starts_with("+OK"), "{ok}");
    }
    let url = StoreUrl::parse_with_env(
        &format!("redis+shards://:hunter2@{}", shard_hosts(&servers)),
        |_| None,
    )
    .unwrap();
    let topology = Topology::connect(&url).await.unwrap();
    let _: String = redis::cmd("PING")
        .query_async(&mut topology.route("t"))
        .await
        .unwrap();
    for text in [
        format!("{topology:?}"),
        format!("{:?}", topology.route("t")),
        url.to_string(),
    ] {
        assert!(!text.contains("hunter2"), "{text}");
    }
    // A wrong password is an error, not a panic, and is not echoed.
    let wrong = StoreUrl::parse_with_env(
        &format!("redis+shards://:nope-secret@{}", shard_hosts(&servers[..1])),
        |_| None,
    )
    .unwrap();
    let err = Topology::connect(&wrong).await.unwrap_err();
    assert!(!format!("{err} {err:?}").contains("nope-secret"), "{err:?}");
}
