//! Behaviour of the in-memory store on a manual clock.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::{AlgorithmKind, CheckError, LimitSpec, Limiter, ManualClock, Rate};
use sluice_store::{Check, KeyHasher, Limit, MemoryStore, MemoryStoreConfig};

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
    let wide = store.limit(
        "wide",
        limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 10),
    );
    let narrow = store.limit(
        "narrow",
        limiter(AlgorithmKind::FixedWindow, Rate::per_minute(2), 2),
    );
    let key = h.key_id("k");
    let checks = |cost| {
        [
            Check {
                limit: &wide,
                key,
                cost,
            },
            Check {
                limit: &narrow,
                key,
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
    let a = store.limit("a", limiter(AlgorithmKind::Gcra, Rate::per_second(10), 20));
    let b = store.limit("b", limiter(AlgorithmKind::Gcra, Rate::per_second(10), 5));
    let key = h.key_id("k");
    let checks = [
        Check {
            limit: &a,
            key,
            cost: 6,
        },
        Check {
            limit: &b,
            key,
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
    assert!(a.is_empty() && b.is_empty());
}

#[test]
fn replenished_keys_are_forgotten() {
    // The mutex table (token bucket) and the atomic one (GCRA).
    for kind in [AlgorithmKind::TokenBucket, AlgorithmKind::Gcra] {
        forgets_replenished(kind);
    }
}

fn forgets_replenished(kind: AlgorithmKind) {
    let (store, clock) = store(1000);
    let h = KeyHasher::random();
    let l = store.limit("l", limiter(kind, Rate::per_second(10), 20));
    for i in 0..100 {
        let key = h.key_id(&format!("k{i}"));
        store
            .check(&[Check {
                limit: &l,
                key,
                cost: 5,
            }])
            .unwrap();
    }
    assert_eq!(l.len(), 100, "{kind:?}");
    clock.advance(SEC / 2 - 1);
    assert_eq!(store.purge_expired(), 0, "{kind:?}");
    clock.advance(1);
    assert_eq!(store.purge_expired(), 100, "{kind:?}");
    assert!(l.is_empty(), "{kind:?}");
}

#[test]
fn the_key_count_is_capped_and_eviction_favours_nearly_replenished_keys() {
    // The mutex table (token bucket) and the atomic one (GCRA).
    for kind in [AlgorithmKind::TokenBucket, AlgorithmKind::Gcra] {
        capped_and_evicting(kind);
    }
}

fn capped_and_evicting(kind: AlgorithmKind) {
    let (store, _clock) = store(64);
    let h = KeyHasher::random();
    let l = store.limit("l", limiter(kind, Rate::per_second(1), 100));
    // One heavy key that must survive a flood of light keys.
    let heavy = h.key_id("heavy");
    store
        .check(&[Check {
            limit: &l,
            key: heavy,
            cost: 100,
        }])
        .unwrap();
    for i in 0..10_000 {
        let key = h.key_id(&format!("spray{i}"));
        store
            .check(&[Check {
                limit: &l,
                key,
                cost: 1,
            }])
            .unwrap();
        assert!(l.len() <= l.capacity(), "{kind:?}");
    }
    let again = store
        .check(&[Check {
            limit: &l,
            key: heavy,
            cost: 1,
        }])
        .unwrap();
    assert!(
        !again.allowed,
        "{kind:?}: the exhausted key was not evicted"
    );
}

#[test]
fn a_clock_stepping_back_admits_nothing_extra_and_loses_nothing() {
    let (store, clock) = store(1000);
    let h = KeyHasher::random();
    let l = store.limit(
        "l",
        limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 10),
    );
    let key = h.key_id("k");
    let check = |cost| {
        store
            .check(&[Check {
                limit: &l,
                key,
                cost,
            }])
            .unwrap()
            .allowed
    };
    assert!(check(10));
    clock.advance(SEC / 2); // five tokens back, seen by a peek
    assert!(check(0));
    // An hour backwards: a reading earlier than the state's only refuses.
    let later = clock_now(&clock);
    clock.set(later - 3600 * SEC);
    assert!(!check(1), "nothing extra");
    // Back at the later time, the five refilled tokens are all there.
    clock.set(later);
    assert!(check(5), "the five refilled tokens are still there");
    assert!(!check(1), "nothing extra");
}

#[test]
fn the_same_id_and_definition_share_state_and_a_new_definition_starts_fresh() {
    let (store, _clock) = store(1000);
    let key = KeyHasher::random().key_id("k");
    let spec = limiter(AlgorithmKind::TokenBucket, Rate::per_second(1), 3);
    let first = store.limit("l", spec);
    let one = |l: &Limit| {
        store
            .check_one(&Check {
                limit: l,
                key,
                cost: 1,
            })
            .unwrap()
    };
    assert_eq!(one(&first).remaining, 2);
    let same = store.limit("l", spec);
    assert_eq!(
        one(&same).remaining,
        1,
        "same id and definition: same counters"
    );
    let changed = store.limit(
        "l",
        limiter(AlgorithmKind::TokenBucket, Rate::per_second(1), 5),
    );
    assert_eq!(
        one(&changed).remaining,
        4,
        "a changed definition starts fresh"
    );
}

#[test]
fn a_request_naming_one_state_twice_is_charged_the_sum() {
    for algorithm in [
        AlgorithmKind::SlidingLog,
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::FixedWindow,
    ] {
        let (store, _clock) = store(1000);
        let key = KeyHasher::random().key_id("k");
        let l = store.limit("l", limiter(algorithm, Rate::per_minute(3), 3));
        let other = store.limit("o", limiter(algorithm, Rate::per_minute(9), 9));
        let c = Check {
            limit: &l,
            key,
            cost: 1,
        };
        let o = Check {
            limit: &other,
            key,
            cost: 1,
        };
        // 3 units: the first request takes 2 of them.
        let first = store.check(&[c, o, c]).unwrap();
        assert!(first.allowed, "{algorithm:?}");
        assert_eq!(first.decisions[0], first.decisions[2]);
        assert_eq!(first.decisions[0].remaining, 1, "{algorithm:?}");
        // One unit left: a request costing two in total must be refused.
        let second = store.check(&[c, o, c]).unwrap();
        assert!(!second.allowed, "{algorithm:?}");
        let one = store.check_one(&c).unwrap();
        assert!(one.allowed && one.remaining == 0, "{algorithm:?}: {one:?}");
    }
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
    let l: Arc<Limit> = store.limit("l", limiter(AlgorithmKind::Gcra, Rate::per_second(1), 1000));
    let key = h.key_id("shared");
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (store, l, admitted) = (store.clone(), l.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..1000 {
                    let c = Check {
                        limit: &l,
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

/// A peek decides as a check would, for every algorithm, and charges
/// nothing; a cost beyond the capacity is the same error.
#[test]
fn a_peek_is_a_check_that_charges_nothing() {
    use AlgorithmKind::*;
    let (store, clock) = store(1000);
    let key = KeyHasher::random().key_id("k");
    for algorithm in [
        FixedWindow,
        SlidingLog,
        SlidingWindow,
        TokenBucket,
        LeakyBucket,
        Gcra,
    ] {
        let limit = store.limit(
            &format!("{algorithm:?}"),
            limiter(algorithm, Rate::per_minute(4), 4),
        );
        let check = |cost| Check {
            limit: &limit,
            key,
            cost,
        };
        for _ in 0..3 {
            let peeked = store.peek_one(&check(2)).unwrap();
            let checked = store.check_one(&check(2)).unwrap();
            assert_eq!(peeked, checked, "{algorithm:?}");
            clock.advance(SEC);
        }
        let before = store.peek_one(&check(0)).unwrap();
        assert!(!store.peek_one(&check(4)).unwrap().allowed, "{algorithm:?}");
        assert_eq!(store.peek_one(&check(0)).unwrap(), before, "{algorithm:?}");
        assert!(matches!(
            store.peek_one(&check(5)),
            Err(CheckError::CostExceedsCapacity { .. })
        ));
    }
}
