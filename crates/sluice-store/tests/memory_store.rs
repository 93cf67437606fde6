//! Behaviour of the in-memory store on a manual clock.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::{AlgorithmKind, CheckError, LimitSpec, Limiter, ManualClock, Rate};
use sluice_store::{Check, KeyHasher, MemoryStore, MemoryStoreConfig};

const SEC: u64 = 1_000_000_000;

fn limiter(algorithm: AlgorithmKind, rate: Rate, burst: u64) -> Limiter {
    LimitSpec {
        algorithm,
        rate,
        burst,
        nodelay: true,
    }
    .build()
    .unwrap()
}

fn store(max_keys: usize) -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(100_000 * SEC);
    let cfg = MemoryStoreConfig {
        max_keys,
        shards: 4,
    };
    (MemoryStore::with_clock(cfg, clock.clone()), clock)
}

#[test]
fn a_refused_request_consumes_nothing_from_any_limit() {
    let (store, _clock) = store(1000);
    let h = KeyHasher::random();
    let wide = limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 10);
    let narrow = limiter(AlgorithmKind::FixedWindow, Rate::per_minute(2), 2);
    let checks = |cost| {
        [
            Check {
                limiter: &wide,
                key: h.key_id("wide", "k"),
                cost,
            },
            Check {
                limiter: &narrow,
                key: h.key_id("narrow", "k"),
                cost,
            },
        ]
    };
    assert!(store.check(&checks(1)).unwrap().allowed);
    assert!(store.check(&checks(1)).unwrap().allowed);
    // The narrow limit is exhausted: three refusals must not touch `wide`.
    for _ in 0..3 {
        let r = store.check(&checks(1)).unwrap();
        assert!(!r.allowed);
        assert!(r.decisions[0].allowed, "wide would allow");
        assert_eq!(r.decisions[0].remaining, 8, "wide was not charged");
        assert!(!r.decisions[1].allowed);
    }
}

#[test]
fn an_impossible_cost_is_an_error_and_changes_nothing() {
    let (store, _clock) = store(1000);
    let h = KeyHasher::random();
    let a = limiter(AlgorithmKind::Gcra, Rate::per_second(10), 20);
    let b = limiter(AlgorithmKind::Gcra, Rate::per_second(10), 5);
    let checks = [
        Check {
            limiter: &a,
            key: h.key_id("a", "k"),
            cost: 6,
        },
        Check {
            limiter: &b,
            key: h.key_id("b", "k"),
            cost: 6,
        },
    ];
    assert_eq!(
        store.check(&checks),
        Err(CheckError::CostExceedsCapacity {
            cost: 6,
            capacity: 5
        })
    );
    assert!(store.is_empty());
}

#[test]
fn replenished_keys_are_forgotten() {
    let (store, clock) = store(1000);
    let h = KeyHasher::random();
    let l = limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 20);
    for i in 0..100 {
        let key = h.key_id("l", &format!("k{i}"));
        store
            .check(&[Check {
                limiter: &l,
                key,
                cost: 5,
            }])
            .unwrap();
    }
    assert_eq!(store.len(), 100);
    clock.advance(SEC / 2 - 1);
    assert_eq!(store.purge_expired(), 0);
    clock.advance(1);
    assert_eq!(store.purge_expired(), 100);
    assert!(store.is_empty());
}

#[test]
fn the_key_count_is_capped_and_eviction_favours_nearly_replenished_keys() {
    let (store, _clock) = store(64);
    let h = KeyHasher::random();
    let l = limiter(AlgorithmKind::TokenBucket, Rate::per_second(1), 100);
    // One heavy key that must survive a flood of light keys.
    let heavy = h.key_id("l", "heavy");
    store
        .check(&[Check {
            limiter: &l,
            key: heavy,
            cost: 100,
        }])
        .unwrap();
    for i in 0..10_000 {
        let key = h.key_id("l", &format!("spray{i}"));
        store
            .check(&[Check {
                limiter: &l,
                key,
                cost: 1,
            }])
            .unwrap();
        assert!(store.len() <= store.capacity());
    }
    let again = store
        .check(&[Check {
            limiter: &l,
            key: heavy,
            cost: 1,
        }])
        .unwrap();
    assert!(!again.allowed, "the exhausted key was not evicted");
}

#[test]
fn a_clock_stepping_back_neither_admits_extra_nor_refuses_within_quota() {
    let (store, clock) = store(1000);
    let h = KeyHasher::random();
    let l = limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 10);
    let key = h.key_id("l", "k");
    let check = |cost| {
        store
            .check(&[Check {
                limiter: &l,
                key,
                cost,
            }])
            .unwrap()
            .allowed
    };
    assert!(check(10));
    clock.advance(SEC / 2); // five tokens back, seen by a peek
    assert!(check(0));
    // An hour backwards: time stands still at the latest reading.
    clock.set(clock_now(&clock) - 3600 * SEC);
    assert!(check(5), "the five refilled tokens are still there");
    assert!(!check(1), "nothing extra");
}

fn clock_now(c: &ManualClock) -> u64 {
    use sluice_core::Clock;
    c.now()
}

#[test]
fn threads_hammering_one_key_admit_exactly_the_burst() {
    let (store, _clock) = store(1000);
    let store = Arc::new(store);
    let h = KeyHasher::random();
    let l = Arc::new(limiter(AlgorithmKind::Gcra, Rate::per_second(1), 1000));
    let key = h.key_id("l", "shared");
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (store, l, admitted) = (store.clone(), l.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    let c = Check {
                        limiter: &l,
                        key,
                        cost: 1,
                    };
                    if store.check(&[c]).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    // The clock does not move: exactly the burst passes.
    assert_eq!(admitted.load(Ordering::Relaxed), 1000);
}
