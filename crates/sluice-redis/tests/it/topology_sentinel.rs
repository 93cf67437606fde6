//! Sentinel: the topology finds the master through the Sentinels and
//! follows a real failover. One master, one replica, three Sentinels
//! (quorum 2), all real processes.

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use sluice_redis::StoreUrl;
use sluice_redis::topology::{Route, Topology};
use sluice_testkit::{SentinelSetup, require_redis};

/// A hang guard for the whole failover, not a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

const TAG: &str = "00000000000000000000000000000abc";

async fn incr(route: &mut Route, by: i64) -> redis::RedisResult<i64> {
    redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
        .key(format!("sluice:{{{TAG}}}:x"))
        .arg(by)
        .invoke_async(route)
        .await
}

async fn connect(setup: &SentinelSetup) -> Topology {
    let url = StoreUrl::parse_with_env(&setup.url(), |_| None).unwrap();
    Topology::connect(&url).await.unwrap()
}

/// Writes through the topology until one succeeds on the promoted replica.
async fn write_until_promoted(setup: &SentinelSetup, topology: &Topology) -> (Duration, usize) {
    let start = Instant::now();
    let mut failures = 0;
    let replica = setup.replica().port();
    loop {
        assert!(start.elapsed() < GUARD, "no failover within {GUARD:?}");
        let mut route = topology.route(TAG);
        match incr(&mut route, 1).await {
            Ok(_) if topology.sentinel_master().map(|m| m.1) == Some(replica) => {
                return (start.elapsed(), failures);
            }
            Ok(_) => {}
            Err(_) => failures += 1,
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_the_master_when_it_dies() {
    if !require_redis() {
        return;
    }
    let mut setup = SentinelSetup::start("sluice-kill");
    let topology = connect(&setup).await;
    assert_eq!(topology.sentinel_master().unwrap().1, setup.master().port());
    assert_eq!(topology.node_of(TAG), Some(0));
    assert_eq!(incr(&mut topology.route(TAG), 5).await.unwrap(), 5);
    assert!(
        setup
            .master()
            .command(&["GET", &format!("sluice:{{{TAG}}}:x")])
            .unwrap()
            .contains('5')
    );

    setup.kill_master();
    let (took, failures) = write_until_promoted(&setup, &topology).await;
    eprintln!(
        "master killed: writes land on the promoted replica after {took:?} ({failures} failed writes)"
    );

    // A marker written through the topology is on the promoted replica.
    let marker = "sluice:{marker}:after-kill";
    let _: () = redis::cmd("SET")
        .arg(marker)
        .arg("yes")
        .query_async(&mut topology.route("marker"))
        .await
        .unwrap();
    assert!(
        setup
            .replica()
            .command(&["GET", marker])
            .unwrap()
            .contains("yes")
    );
    assert!(
        setup
            .replica()
            .command(&["ROLE"])
            .unwrap()
            .contains("master")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_follow_a_forced_failover() {
    if !require_redis() {
        return;
    }
    let setup = SentinelSetup::start("sluice-forced");
    let topology = connect(&setup).await;
    assert_eq!(incr(&mut topology.route(TAG), 1).await.unwrap(), 1);

    // The old master stays up and is demoted to a replica: it answers
    // READONLY (or drops clients), and the topology asks the Sentinels again.
    setup.force_failover();
    let (took, failures) = write_until_promoted(&setup, &topology).await;
    eprintln!(
        "forced failover: writes land on the promoted replica after {took:?} ({failures} failed writes)"
    );
    let value = setup
        .replica()
        .command(&["GET", &format!("sluice:{{{TAG}}}:x")])
        .unwrap();
    assert!(
        !value.starts_with("$-1"),
        "no counter on the new master: {value}"
    );
    let deadline = Instant::now() + GUARD;
    while !setup.master().command(&["ROLE"]).unwrap().contains("slave") {
        assert!(Instant::now() < deadline, "old master never demoted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
