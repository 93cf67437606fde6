//! The deployments the conformance suite runs over, and an engine on each.
//!
//! Every store gets the same engine, policy and hashing key; a test runs a
//! scenario on each and compares what each decided with what the memory
//! store decided. The Redis deployments are real processes
//! (`sluice-testkit`), started by [`Deployments::start`] and stopped when it
//! is dropped; the scenarios that share them keep apart by their client
//! keys.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{HeaderMap, Method};
use sluice_core::SystemClock;
use sluice_policy::{DecideError, Engine, Policy, RequestInfo, Verdict};
use sluice_protect::{ProtectOptions, Remote};
use sluice_redis::{RedisStore, RuntimeState, StoreUrl};
use sluice_store::KeyHasher;
use sluice_store::seam::{Fallback, RuntimeStore, Store};
use sluice_testkit::{RedisCluster, RedisServer, SentinelSetup};

/// Where the limits live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Memory,
    Single,
    Cluster,
    Shards,
    Sentinel,
}

/// The Redis processes of every deployment, owned: dropping this stops
/// them all.
pub struct Deployments {
    redis: Option<Servers>,
}

struct Servers {
    single: RedisServer,
    cluster: RedisCluster,
    shards: Vec<RedisServer>,
    sentinel: SentinelSetup,
}

/// The protection of the suite's Redis stores, with `fallback`: a generous
/// timeout (the suite compares decisions, and a busy machine must not turn
/// one into a fallback's), and no over-limit cache (every decision is the
/// store's).
pub fn protect_options(fallback: Fallback) -> ProtectOptions {
    ProtectOptions {
        timeout: Duration::from_secs(2),
        fallback,
        over_limit_cache: false,
        ..ProtectOptions::default()
    }
}

/// The runtime every store's background tasks run on.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

impl Deployments {
    /// Starts every deployment: the memory store, and the Redis ones where
    /// Redis is installed (required when `SLUICE_REQUIRE_REDIS` is set).
    pub fn start() -> Self {
        let redis = sluice_testkit::require_redis().then(|| Servers {
            single: RedisServer::start(),
            cluster: RedisCluster::start(3),
            shards: vec![RedisServer::start(), RedisServer::start()],
            sentinel: SentinelSetup::start("conformance"),
        });
        Self { redis }
    }

    /// The deployments to run over.
    pub fn kinds(&self) -> Vec<Kind> {
        match self.redis {
            Some(_) => vec![
                Kind::Memory,
                Kind::Single,
                Kind::Cluster,
                Kind::Shards,
                Kind::Sentinel,
            ],
            None => vec![Kind::Memory],
        }
    }

    fn url(&self, kind: Kind) -> Option<String> {
        let s = self.redis.as_ref()?;
        match kind {
            Kind::Memory => None,
            Kind::Single => Some(s.single.url()),
            Kind::Cluster => Some(s.cluster.url()),
            Kind::Shards => Some(format!(
                "redis+shards://{}",
                s.shards
                    .iter()
                    .map(|r| format!("127.0.0.1:{}", r.port()))
                    .collect::<Vec<_>>()
                    .join(",")
            )),
            Kind::Sentinel => Some(s.sentinel.url()),
        }
    }

    /// The stores of one deployment: limits and runtime state.
    pub fn stores(&self, kind: Kind) -> (Arc<dyn Store>, Arc<dyn RuntimeStore>) {
        let Some(url) = self.url(kind) else {
            return (
                Arc::new(sluice_store::MemoryStore::new(Default::default())),
                Arc::new(sluice_store::MemoryRuntime::default()),
            );
        };
        let url: StoreUrl = url.parse().unwrap();
        runtime().block_on(async {
            // Every decision must be Redis's: the local fallback decides
            // as the memory store does, and a comparison it answered would
            // prove nothing (`get` checks).
            let shared = sluice_redis::shared(url, true, protect_options(Fallback::Deny));
            shared.connect(Duration::from_secs(20)).await.unwrap();
            let runtime = Arc::new(RuntimeState::new(shared.remote().clone()));
            (shared as Arc<dyn Store>, runtime as Arc<dyn RuntimeStore>)
        })
    }

    /// The Redis store of a deployment, unprotected, for decisions at
    /// controlled times (its `*_at` methods); `None` for the memory store.
    pub fn redis_store(&self, kind: Kind) -> Option<Arc<RedisStore>> {
        let url: StoreUrl = self.url(kind)?.parse().unwrap();
        runtime().block_on(async {
            let remote = sluice_redis::RedisRemote::new(url, false);
            Remote::connect(&*remote, Duration::from_secs(20))
                .await
                .unwrap();
            remote.store()
        })
    }

    /// The Redis Cluster of the Cluster deployment, where Redis runs.
    pub fn cluster(&self) -> Option<&RedisCluster> {
        self.redis.as_ref().map(|s| &s.cluster)
    }

    /// An engine on a deployment.
    pub fn engine(&self, kind: Kind, toml: &str) -> Engine {
        let (store, runtime) = self.stores(kind);
        let policy = Policy::from_toml("conformance.toml", toml).unwrap();
        Engine::on(policy, store, runtime, hasher(), SystemClock::new())
    }
}

/// The hashing key of every engine: the same client is the same key id on
/// every store, so rollouts pick the same keys.
pub fn hasher() -> KeyHasher {
    KeyHasher::from_secret(b"sluice conformance")
}

/// A client key used by no other test in this process.
pub fn fresh_key(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Decides a GET of `path` with `X-Api-Key: key`, and checks that a store
/// over the network decided it (not its fallback or its cache). On a store
/// that answers at once (memory) the decision is `decide_now`'s, the path
/// `sluice serve` and the tower layer run there; on the others, `decide`'s.
pub fn get(e: &Engine, key: &str, path: &str) -> Result<Verdict, DecideError> {
    let mut h = HeaderMap::new();
    h.insert("x-api-key", key.parse().unwrap());
    let req = RequestInfo {
        method: &Method::GET,
        path,
        headers: &h,
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: None,
        body: None,
    };
    let decided = match e.decide_now(&req) {
        Some(now) => now,
        None => runtime().block_on(e.decide(&req)),
    };
    if let Some(h) = e.remote_health() {
        assert_eq!(
            (h.fallback_decisions, h.cache_hits),
            (0, 0),
            "on {}: a decision did not come from the store",
            h.address
        );
    }
    decided
}

/// Runs a future on the shared runtime.
pub fn block<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// What a verdict shows a client, without the times (Redis's clock moves
/// on between requests): allowed, and each limit's name, limit, remaining
/// and whether it refused; the shadowed limits alike.
pub type Shown = (bool, Vec<(String, u64, u64, bool)>, Vec<(String, bool)>);

pub fn shown(v: &Verdict) -> Shown {
    (
        v.allowed,
        v.results
            .iter()
            .map(|r| {
                (
                    r.name().to_owned(),
                    r.decision.limit,
                    r.decision.remaining,
                    r.decision.allowed,
                )
            })
            .collect(),
        v.shadow
            .iter()
            .map(|r| (r.name().to_owned(), r.decision.allowed))
            .collect(),
    )
}
