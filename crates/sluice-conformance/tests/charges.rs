//! `Engine::decide_charges` (the Envoy service's path) on a real Redis
//! behind its protection, when Redis decides the charges and then fails to
//! take a refund: the verdict says a fallback decided part of it.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use sluice_conformance::runtime;
use sluice_core::{AlgorithmKind, LimitSpec, Rate, SystemClock};
use sluice_policy::{Charge, Counting, Engine, Limit, LimitLabels, Policy};
use sluice_protect::{Protected, Remote, RemoteError};
use sluice_redis::{RedisRemote, StoreUrl};
use sluice_store::MemoryRuntime;
use sluice_store::seam::{Check, Checked, CounterDef, Fallback, Pending, Slot, Store};
use sluice_testkit::RedisServer;

/// Redis, whose refunds fail (as when it goes down between a request's
/// charge and the refund that follows it).
#[derive(Debug)]
struct RefundsFail(Arc<RedisRemote>);

impl Remote for RefundsFail {
    fn slot(&self, def: &CounterDef) -> Slot {
        self.0.slot(def)
    }
    fn try_check<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>> {
        self.0.try_check(checks)
    }
    fn try_refund<'a>(
        &'a self,
        _checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>> {
        Pending::ready(Err(RemoteError::Failed("refunds fail".into())))
    }
    fn connect(&self, within: Duration) -> Pending<'_, Result<(), RemoteError>> {
        self.0.connect(within)
    }
    fn is_connected(&self) -> bool {
        self.0.is_connected()
    }
    fn address(&self) -> String {
        self.0.address()
    }
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
}

fn limit(name: &str, per_hour: u64) -> Limit {
    let spec = LimitSpec {
        algorithm: AlgorithmKind::FixedWindow,
        rate: Rate::new(per_hour, 3_600_000_000_000).unwrap(),
        burst: per_hour,
        nodelay: true,
    };
    Limit::plain(name, LimitLabels::named(name.into(), "*"), spec).unwrap()
}

#[test]
fn a_quota_refusal_whose_refund_falls_back_says_so() {
    if !sluice_testkit::require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let url: StoreUrl = redis.url().parse().unwrap();
    runtime().block_on(async {
        let store = Protected::start(
            Arc::new(RefundsFail(RedisRemote::new(url, true))),
            sluice_conformance::protect_options(Fallback::Local),
        );
        store.connect(Duration::from_secs(20)).await.unwrap();
        let policy = Policy::from_toml(
            "charges.toml",
            "[[limits]]\nname = \"unused\"\nkey = \"global\"\nrate = \"1/h\"\n",
        )
        .unwrap();
        let hasher = sluice_conformance::hasher();
        let engine = Engine::on(
            policy,
            store.clone() as Arc<dyn Store>,
            Arc::new(MemoryRuntime::default()),
            hasher,
            SystemClock::new(),
        );
        let (enforced, quota) = (limit("enforced", 5), limit("quota", 1));
        let (ce, cq) = (
            store.counter(enforced.counted.clone()),
            store.counter(quota.counted.clone()),
        );
        let key = engine.hasher().key_id("client");
        let charges = [
            Charge {
                limit: &enforced,
                counter: &ce,
                key,
                cost: 1,
                counting: Counting::Enforced,
                lease: None,
            },
            Charge {
                limit: &quota,
                counter: &cq,
                key,
                cost: 1,
                counting: Counting::Quota,
                lease: None,
            },
        ];
        let first = engine.decide_charges(&charges).await.unwrap();
        assert!(first.allowed && first.fallback.is_none(), "{first:?}");
        // The quota is used up: refused, and the enforced charge Redis
        // took is given back, by the local fallback since Redis fails it.
        let second = engine.decide_charges(&charges).await.unwrap();
        assert!(!second.allowed, "{second:?}");
        assert_eq!(second.fallback, Some(Fallback::Local), "{second:?}");
    });
}
