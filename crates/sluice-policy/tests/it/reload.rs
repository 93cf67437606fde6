//! What a reload keeps of a limit's counts: an unchanged limit keeps them,
//! a changed one starts fresh, and so does one a second reload brings back.

use crate::DecideHere;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::ManualClock;
use sluice_policy::{Engine, Policy, RequestInfo};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

const ONE: &str = "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 1\n";

fn policy(toml: &str) -> Policy {
    Policy::from_toml("reload.toml", toml).unwrap()
}

fn allowed(e: &Engine<ManualClock>) -> bool {
    e.decide_here(&RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &HeaderMap::new(),
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: None,
    })
    .unwrap()
    .allowed
}

#[test]
fn a_limit_changed_and_changed_back_starts_fresh() {
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    let e = Engine::with_store(policy(ONE), Arc::new(store), KeyHasher::random());
    assert!(allowed(&e));
    assert!(!allowed(&e), "the burst of one is spent");
    // The same limit: the same counts.
    e.replace_policy(policy(ONE));
    assert!(!allowed(&e));
    // Changed, then back with no request in between: each time a new limit.
    e.replace_policy(policy(&ONE.replace("1/min", "2/min")));
    e.replace_policy(policy(ONE));
    assert!(allowed(&e), "the limit brought back starts fresh");
    assert!(!allowed(&e));
}
