//! Allow and deny lists.

#![allow(clippy::unwrap_used)]

use crate::DecideHere;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::ManualClock;
use sluice_policy::{DecideError, Engine, Policy, RequestInfo, Verdict};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

const CONFIG: &str = r#"
[client]
key = "header:X-Api-Key"
trusted_proxies = ["127.0.0.1/32"]

[access]
allow_keys = ["monitoring"]
allow_cidrs = ["10.0.0.0/8"]
deny_keys = ["stolen-key"]
deny_cidrs = ["203.0.113.0/24", "10.6.6.0/24"]

[[limits]]
name = "per-key"
key = "header:X-Api-Key"
rate = "1/min"
burst = 2
"#;

fn engine() -> Engine<ManualClock> {
    let policy = Policy::from_toml("access.toml", CONFIG).unwrap();
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"a"))
}

fn decide(
    e: &Engine<ManualClock>,
    key: &str,
    ip: &str,
    xff: Option<&str>,
) -> Result<Verdict, DecideError> {
    let mut h = HeaderMap::new();
    h.insert("x-api-key", key.parse().unwrap());
    if let Some(x) = xff {
        h.insert("x-forwarded-for", x.parse().unwrap());
    }
    e.decide_here(&RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &h,
        peer: Some(ip.parse().unwrap()),
        cost: None,
        body: None,
    })
}

#[test]
fn denied_keys_and_networks_are_refused_outright() {
    let e = engine();
    assert_eq!(
        decide(&e, "stolen-key", "192.0.2.1", None),
        Err(DecideError::Denied)
    );
    assert_eq!(
        decide(&e, "fine", "203.0.113.9", None),
        Err(DecideError::Denied)
    );
    // Behind a trusted proxy, the forwarded client address counts.
    assert_eq!(
        decide(&e, "fine", "127.0.0.1", Some("203.0.113.9")),
        Err(DecideError::Denied)
    );
    // A deny entry beats an allow entry.
    assert_eq!(
        decide(&e, "fine", "10.6.6.6", None),
        Err(DecideError::Denied)
    );
    assert!(decide(&e, "fine", "192.0.2.1", None).unwrap().allowed);
}

#[test]
fn allowed_clients_are_never_limited_but_still_counted() {
    let e = engine();
    for ip in ["192.0.2.1", "10.1.2.3"] {
        let key = if ip == "192.0.2.1" {
            "monitoring"
        } else {
            "internal"
        };
        let verdicts: Vec<_> = (0..5).map(|_| decide(&e, key, ip, None).unwrap()).collect();
        assert!(
            verdicts.iter().all(|v| v.allowed && v.results.is_empty()),
            "{key}"
        );
        let counted: Vec<u64> = verdicts
            .iter()
            .map(|v| v.shadow[0].decision.remaining)
            .collect();
        assert_eq!(counted, [1, 0, 0, 0, 0], "{key}: counted like anyone");
    }
    // Anyone else is limited.
    let others: Vec<bool> = (0..3)
        .map(|_| decide(&e, "someone", "192.0.2.7", None).unwrap().allowed)
        .collect();
    assert_eq!(others, [true, true, false]);
}
