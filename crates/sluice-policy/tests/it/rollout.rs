//! Shadow mode and percentage enforcement, on a manual clock.

#![allow(clippy::unwrap_used)]

use crate::DecideHere;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::ManualClock;
use sluice_policy::{Engine, Policy, RequestInfo};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

fn engine(toml: &str) -> Engine<ManualClock> {
    let policy = Policy::from_toml("rollout.toml", toml).unwrap();
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"rollout"))
}

fn decide(e: &Engine<ManualClock>, key: &str) -> sluice_policy::Verdict {
    let mut h = HeaderMap::new();
    h.insert("x-api-key", key.parse().unwrap());
    e.decide_here(&RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &h,
        peer: None,
        cost: None,
        body: None,
    })
    .unwrap()
}

const LIMIT: &str = r#"
[[limits]]
name = "new"
key = "header:X-Api-Key"
rate = "1/min"
burst = 2
"#;

#[test]
fn a_shadow_limit_records_but_never_refuses_or_shows() {
    let e = engine(&format!("{LIMIT}shadow = true\n"));
    let verdicts: Vec<_> = (0..5).map(|_| decide(&e, "k")).collect();
    assert!(verdicts.iter().all(|v| v.allowed && v.results.is_empty()));
    let would: Vec<bool> = verdicts
        .iter()
        .map(|v| v.shadow[0].decision.allowed)
        .collect();
    assert_eq!(would, [true, true, false, false, false]);
}

#[test]
fn enforce_percent_is_sticky_per_key_and_near_its_share() {
    let e = engine(&format!("{LIMIT}enforce_percent = 50\n"));
    let mut enforced = 0;
    for k in 0..1000 {
        let key = format!("key-{k}");
        let first = decide(&e, &key);
        let is_enforced = !first.results.is_empty();
        assert_eq!(is_enforced, first.shadow.is_empty());
        // Sticky: the same key is always on the same side.
        for _ in 0..3 {
            let v = decide(&e, &key);
            assert_eq!(!v.results.is_empty(), is_enforced, "{key}");
            // Enforced keys are refused after their burst; shadowed never.
            assert_eq!(v.allowed, !is_enforced || v.results[0].decision.allowed);
        }
        enforced += usize::from(is_enforced);
    }
    assert!((400..=600).contains(&enforced), "{enforced} of 1000");
}

#[test]
fn zero_and_one_hundred_percent_are_none_and_all() {
    for (percent, enforced) in [(0, false), (100, true)] {
        let e = engine(&format!("{LIMIT}enforce_percent = {percent}\n"));
        for k in 0..100 {
            let v = decide(&e, &format!("k{k}"));
            assert_eq!(!v.results.is_empty(), enforced);
        }
    }
}

#[test]
fn percentages_above_100_are_config_errors() {
    let e = Policy::from_toml("r.toml", &format!("{LIMIT}enforce_percent = 150\n")).unwrap_err();
    assert!(e.to_string().starts_with("r.toml:7:19:"), "{e}");
}

#[test]
fn a_refused_request_does_not_count_against_shadowed_limits() {
    let policy = Policy::from_toml(
        "r.toml",
        r#"
[[limits]]
name = "enforced"
key = "header:X-Api-Key"
rate = "1/min"
burst = 1

[[limits]]
name = "trial"
key = "header:X-Api-Key"
rate = "1/day"
burst = 5
shadow = true
"#,
    )
    .unwrap();
    let clock = ManualClock::new(1 << 50);
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock.clone());
    let e = Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"r"));
    assert_eq!(decide(&e, "k").shadow[0].decision.remaining, 4);
    for _ in 0..3 {
        let v = decide(&e, "k");
        assert!(!v.allowed);
        assert!(v.shadow.is_empty());
    }
    clock.advance(60_000_000_000);
    // The three refusals were not counted by the trial limit: 5 - 2 = 3.
    let v = decide(&e, "k");
    assert!(v.allowed);
    assert_eq!(v.shadow[0].decision.remaining, 3);
}
