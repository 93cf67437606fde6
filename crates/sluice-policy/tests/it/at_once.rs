//! `Engine::decide_now` decides only when everything a decision may wait
//! on answers at once: with the limits in memory but runtime state (burst
//! credits) elsewhere, it answers `None` and charges nothing, and
//! `Engine::decide` then charges the request once.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};
use sluice_core::SystemClock;
use sluice_policy::{Engine, Policy, RequestInfo};
use sluice_store::seam::{
    Check, Checked, Counter, CounterDef, Pending, RuntimeStore, RuntimeStoreError, Store,
    StoreError,
};
use sluice_store::{KeyHasher, KeyId, MemoryRuntime, MemoryStore};

/// Runtime state in memory that says it does not answer at once (as a
/// shared one would not).
#[derive(Debug, Default)]
struct Remote(MemoryRuntime);

impl RuntimeStore for Remote {
    fn set_plan<'a>(
        &'a self,
        key: KeyId,
        plan: &'a str,
    ) -> Pending<'a, Result<(), RuntimeStoreError>> {
        self.0.set_plan(key, plan)
    }
    fn remove_plan(&self, key: KeyId) -> Pending<'_, Result<bool, RuntimeStoreError>> {
        self.0.remove_plan(key)
    }
    fn set_credits(&self, key: KeyId, credits: u64) -> Pending<'_, Result<(), RuntimeStoreError>> {
        self.0.set_credits(key, credits)
    }
    fn credits(&self, key: KeyId) -> Pending<'_, Result<u64, RuntimeStoreError>> {
        self.0.credits(key)
    }
    fn spend_credits(
        &self,
        key: KeyId,
        need: u64,
        within: Duration,
    ) -> Pending<'_, Result<Option<u64>, RuntimeStoreError>> {
        self.0.spend_credits(key, need, within)
    }
    fn refund_credits(
        &self,
        key: KeyId,
        amount: u64,
    ) -> Pending<'_, Result<(), RuntimeStoreError>> {
        self.0.refund_credits(key, amount)
    }
}

/// An engine of one per-IP limit (2 an hour) on `store` and `runtime`.
fn per_ip(store: Arc<dyn Store>, runtime: Arc<dyn RuntimeStore>) -> Engine {
    let policy = Policy::from_toml(
        "at_once.toml",
        "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"2/h\"\nburst = 2\n",
    )
    .unwrap();
    Engine::on(
        policy,
        store,
        runtime,
        KeyHasher::random(),
        SystemClock::new(),
    )
}

/// A `GET /` from one client.
fn get(headers: &HeaderMap) -> RequestInfo<'_> {
    RequestInfo {
        method: &Method::GET,
        path: "/",
        headers,
        peer: Some("192.0.2.7".parse().unwrap()),
        cost: None,
        body: None,
    }
}

#[test]
fn decide_now_waits_for_a_runtime_store_that_does_not_answer_at_once() {
    let engine = per_ip(
        Arc::new(MemoryStore::new(Default::default())),
        Arc::new(Remote::default()),
    );
    let headers = HeaderMap::new();
    let req = get(&headers);
    assert!(engine.decide_now(&req).is_none(), "nothing decided at once");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let v = rt.block_on(engine.decide(&req)).unwrap();
    // The `None` above charged nothing: this is the first of two.
    assert_eq!((v.allowed, v.results[0].decision.remaining), (true, 1));
}

/// An in-process store that answers at once but keeps `check_one_now`'s
/// default (`None`: a store need not implement it): the memory store
/// behind every other method.
#[derive(Debug)]
struct Plain(MemoryStore);

impl Store for Plain {
    fn kind(&self) -> &'static str {
        "plain"
    }
    fn counter(&self, def: CounterDef) -> Counter {
        Store::counter(&self.0, def)
    }
    fn check<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Store::check(&self.0, checks)
    }
    fn check_each<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Vec<Result<Checked, StoreError>>> {
        Store::check_each(&self.0, checks)
    }
    fn refund<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Store::refund(&self.0, checks)
    }
    fn answers_at_once(&self) -> bool {
        true
    }
}

#[test]
fn a_store_that_answers_at_once_decides_now_without_check_one_now() {
    let engine = per_ip(
        Arc::new(Plain(MemoryStore::new(Default::default()))),
        Arc::new(MemoryRuntime::default()),
    );
    let headers = HeaderMap::new();
    let req = get(&headers);
    let remaining: Vec<_> = (0..3)
        .map(|_| {
            let v = engine.decide_now(&req).expect("decided at once").unwrap();
            (v.allowed, v.results[0].decision.remaining)
        })
        .collect();
    assert_eq!(remaining, [(true, 1), (true, 0), (false, 0)]);
}
