//! Shared setup of the Redis store tests: a real redis-server, a runtime, a
//! plain multiplexed connection, and a reference model on sluice-core.

#![allow(clippy::unwrap_used, dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};

use redis::aio::MultiplexedConnection;
use sluice_core::{AlgorithmKind, Decision, LimitSpec, Limiter, Rate, State};
use sluice_testkit::RedisServer;
use tokio::runtime::Runtime;

/// A running server with a runtime and a connection to it.
pub struct Env {
    pub rt: Runtime,
    pub conn: MultiplexedConnection,
    pub server: RedisServer,
}

/// Starts a server, or `None` when Redis is not installed.
pub fn env() -> Option<Env> {
    if !sluice_testkit::require_redis() {
        return None;
    }
    let server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let conn = rt.block_on(async {
        redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    });
    Some(Env { rt, conn, server })
}

/// The `host:port` list of some servers, comma-separated, as a
/// `redis+shards://` URL takes it.
pub fn shard_hosts(servers: &[RedisServer]) -> String {
    servers
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A limit id never used before in this process.
pub fn fresh_id(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("{prefix}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

pub const KINDS: [AlgorithmKind; 6] = AlgorithmKind::ALL;

pub fn limiter(
    kind: AlgorithmKind,
    amount: u64,
    period: u64,
    burst: u64,
    nodelay: bool,
) -> Limiter {
    LimitSpec {
        algorithm: kind,
        rate: Rate::new(amount, period).unwrap(),
        burst,
        nodelay,
    }
    .build()
    .unwrap()
}

/// sluice-core's all-or-nothing decision over several (limiter, state)
/// pairs, as the memory store makes it.
pub fn reference(checks: &mut [(&Limiter, &mut State, u64)], now_ns: u64) -> (bool, Vec<Decision>) {
    let outcomes: Vec<_> = checks
        .iter()
        .map(|(l, s, cost)| l.check(s, now_ns, *cost).unwrap())
        .collect();
    let allowed = outcomes.iter().all(|o| o.decision.allowed);
    let mut decisions = Vec::new();
    for ((l, s, _), o) in checks.iter_mut().zip(outcomes) {
        if allowed {
            if let Some(u) = o.update {
                l.apply(s, u);
            }
            decisions.push(o.decision);
        } else if o.decision.allowed {
            decisions.push(l.check(s, now_ns, 0).unwrap().decision);
        } else {
            decisions.push(o.decision);
        }
    }
    (allowed, decisions)
}
