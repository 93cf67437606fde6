//! The quick-start policy, decided on a manual clock.

#![allow(clippy::unwrap_used)]

use crate::DecideHere;
use std::path::PathBuf;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::ManualClock;
use sluice_policy::{DecideError, Engine, Policy, RequestInfo};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

const SEC: u64 = 1_000_000_000;

fn engine() -> (Engine<ManualClock>, ManualClock) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/quickstart.toml");
    let policy = Policy::load(&path).unwrap();
    let clock = ManualClock::new(1_000_000 * SEC);
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock.clone());
    (
        Engine::with_store(policy, Arc::new(store), KeyHasher::random()),
        clock,
    )
}

fn headers(key: Option<&str>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some(k) = key {
        h.insert("x-api-key", k.parse().unwrap());
    }
    h
}

fn admitted(engine: &Engine<ManualClock>, key: &str, path: &str, n: usize) -> usize {
    let h = headers(Some(key));
    (0..n)
        .filter(|_| {
            let req = RequestInfo {
                method: &Method::GET,
                path,
                headers: &h,
                peer: Some("192.0.2.1".parse().unwrap()),
                cost: None,
                body: None,
            };
            engine.decide_here(&req).unwrap().allowed
        })
        .count()
}

#[test]
fn free_keys_get_twenty_then_ten_a_second() {
    let (e, clock) = engine();
    assert_eq!(admitted(&e, "alice", "/", 30), 20);
    assert_eq!(
        admitted(&e, "bob", "/", 30),
        20,
        "another key is unaffected"
    );
    clock.advance(SEC);
    assert_eq!(admitted(&e, "alice", "/", 30), 10);
}

#[test]
fn the_pro_key_gets_three_hundred() {
    let (e, _) = engine();
    assert_eq!(admitted(&e, "demo-pro-key", "/", 400), 300);
}

#[test]
fn exports_admit_two_then_refuse_for_thirty_seconds() {
    let (e, _) = engine();
    assert_eq!(admitted(&e, "carol", "/export/report.csv", 5), 2);
    let h = headers(Some("carol"));
    let req = RequestInfo {
        method: &Method::GET,
        path: "/export",
        headers: &h,
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: None,
        body: None,
    };
    let v = e.decide_here(&req).unwrap();
    assert!(!v.allowed);
    assert_eq!(
        v.violated().map(|r| r.name()).collect::<Vec<_>>(),
        ["export"]
    );
    assert_eq!(v.retry_after(), Some(30 * SEC));
    // Refused exports did not spend carol's plan quota: 20 - 2 = 18 left.
    assert_eq!(admitted(&e, "carol", "/", 30), 18);
}

#[test]
fn a_request_without_a_key_is_missing_its_key() {
    let (e, _) = engine();
    let h = headers(None);
    let req = RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &h,
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: None,
        body: None,
    };
    assert!(matches!(
        e.decide_here(&req),
        Err(DecideError::MissingKey(_))
    ));
}

#[test]
fn paths_match_on_whole_segments() {
    let (e, _) = engine();
    // `/exports` is not under `/export`: only the plan limit applies.
    assert_eq!(admitted(&e, "dave", "/exports", 5), 5);
}

#[test]
fn an_explicit_cost_above_a_burst_is_impossible() {
    let (e, _) = engine();
    let h = headers(Some("erin"));
    let req = RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &h,
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: Some(21),
        body: None,
    };
    assert!(matches!(
        e.decide_here(&req),
        Err(DecideError::Impossible { .. })
    ));
}
