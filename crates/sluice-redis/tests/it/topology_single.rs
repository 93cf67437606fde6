//! One Redis node: scripts through a route, recovery after a restart, and
//! paced reconnection while Redis is away. Real `redis-server` processes.

#![allow(clippy::unwrap_used)]

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use sluice_redis::StoreUrl;
use sluice_redis::topology::Topology;
use sluice_testkit::{RedisServer, free_port, require_redis};

/// A hang guard, not a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

const TAG: &str = "0123456789abcdef0123456789abcdef";

fn incr_script() -> redis::Script {
    redis::Script::new("return redis.call('INCRBY', KEYS[1], ARGV[1])")
}

async fn connect(server: &RedisServer) -> Topology {
    let url: StoreUrl = StoreUrl::parse_with_env(&server.url(), |_| None).unwrap();
    Topology::connect(&url).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_runs_through_a_route_and_survives_script_flush() {
    if !require_redis() {
        return;
    }
    let server = RedisServer::start();
    let topology = connect(&server).await;
    assert_eq!(topology.node_of(TAG), Some(0));
    let key = format!("sluice:{{{TAG}}}:x");
    let mut route = topology.route(TAG);
    let n: i64 = incr_script()
        .key(&key)
        .arg(2)
        .invoke_async(&mut route)
        .await
        .unwrap();
    assert_eq!(n, 2);
    // NOSCRIPT: the script is loaded again transparently.
    assert!(
        server
            .command(&["SCRIPT", "FLUSH"])
            .unwrap()
            .starts_with("+OK")
    );
    let n: i64 = incr_script()
        .key(&key)
        .arg(3)
        .invoke_async(&mut route.clone())
        .await
        .unwrap();
    assert_eq!(n, 5);
    // Pipelines go through the same connection.
    let (a, b): (i64, i64) = redis::pipe()
        .cmd("INCR")
        .arg(&key)
        .cmd("INCR")
        .arg(&key)
        .query_async(&mut route)
        .await
        .unwrap();
    assert_eq!((a, b), (6, 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_nothing_fails_promptly_with_an_error() {
    let url =
        StoreUrl::parse_with_env(&format!("redis://127.0.0.1:{}", free_port()), |_| None).unwrap();
    let result = tokio::time::timeout(GUARD, Topology::connect(&url))
        .await
        .unwrap();
    let err = result.unwrap_err();
    eprintln!("connect to a closed port: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_succeed_again_after_redis_restarts() {
    if !require_redis() {
        return;
    }
    let mut server = RedisServer::start();
    let topology = connect(&server).await;
    let mut route = topology.route(TAG);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("1")
        .query_async(&mut route)
        .await
        .unwrap();

    // Down for a few seconds (commands fail meanwhile, so the reconnect
    // backoff reaches its ceiling), then back on the same port.
    server.kill();
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(3) {
        let r: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut route).await;
        assert!(r.is_err());
    }
    server.restart();
    let back = Instant::now();
    let mut failures = 0;
    loop {
        let pong: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut route).await;
        if pong.is_ok() {
            break;
        }
        failures += 1;
        assert!(back.elapsed() < GUARD, "no recovery: {pong:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "after restart: commands succeed again after {:?} ({failures} failed commands)",
        back.elapsed()
    );
    // And scripts work on the fresh (empty) server.
    let n: i64 = incr_script()
        .key("sluice:{t}:x")
        .arg(1)
        .invoke_async(&mut route)
        .await
        .unwrap();
    assert_eq!(n, 1);
}

/// While Redis is away, a listener on its port counts the reconnect
/// attempts (accepting and closing each): the pace must stay a few per
/// second, however many commands fail meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnection_is_paced_while_redis_is_away() {
    if !require_redis() {
        return;
    }
    let mut server = RedisServer::start();
    let port = server.port();
    let topology = connect(&server).await;
    let mut route = topology.route(TAG);
    let _: String = redis::cmd("PING").query_async(&mut route).await.unwrap();

    server.kill();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let attempts = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let counter = {
        let (attempts, stop) = (attempts.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        attempts.fetch_add(1, Ordering::Relaxed);
                        drop(conn);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        })
    };

    // Hammer the route for a while: every command fails.
    let window = Duration::from_secs(4);
    let start = Instant::now();
    let mut commands = 0;
    while start.elapsed() < window {
        let r: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut route).await;
        assert!(r.is_err());
        commands += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    counter.join().unwrap();
    let attempts = attempts.load(Ordering::Relaxed);
    eprintln!(
        "Redis away for {window:?}: {commands} failed commands, {attempts} connection attempts \
         ({:.1}/s)",
        attempts as f64 / window.as_secs_f64()
    );
    // A storm would be one attempt per command or more; this bound is a
    // generous guard, not a measurement.
    assert!(
        attempts <= 40,
        "{attempts} connection attempts in {window:?}"
    );
}
