//! The keyed limiter: each key decides exactly like the algorithm on its own
//! state, keys never share state, threads admit exactly what it allows, and
//! the number of keys stays bounded.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use sluice_core::{AlgorithmKind, CheckError, ManualClock, Rate, State};
use sluice_store::KeyedLimiter;

use crate::common::{SEC, any_spec, lock_free_cases, spec};

#[test]
fn gcra_equivalents_with_whole_nanosecond_intervals_are_lock_free() {
    let clock = ManualClock::new(0);
    for (s, lock_free) in lock_free_cases() {
        let free = KeyedLimiter::<u64, _>::with_clock(&s, 100, clock.clone())
            .unwrap()
            .is_lock_free();
        assert_eq!(free, lock_free, "{s:?}");
    }
}

proptest! {
    /// Whatever path it takes, every key decides exactly like the algorithm
    /// checked on that key's own state.
    #[test]
    fn each_key_decides_like_the_algorithm(
        s in any_spec(),
        start in 0u64..2_000_000_000_000_000_000,
        steps in prop::collection::vec((0u64..2 * SEC, 0u64..4, 0u64..31), 1..80),
    ) {
        let clock = ManualClock::new(start);
        let keyed = KeyedLimiter::<u64, _>::with_shards(&s, 1_000, 2, clock.clone()).unwrap();
        let model = s.build().unwrap();
        let mut states: HashMap<u64, State> = HashMap::new();
        let mut now = start;
        for (dt, key, cost) in steps {
            now += dt;
            clock.set(now);
            let got = keyed.check(&key, cost);
            let want = model.check_and_apply(states.entry(key).or_insert(State::Fresh), now, cost);
            prop_assert_eq!(got, want);
        }
    }
}

#[test]
fn string_keys_are_looked_up_by_str_and_never_share_state() {
    let clock = ManualClock::new(1_000 * SEC);
    let s = spec(AlgorithmKind::Gcra, Rate::per_second(1), 3, false);
    let keyed: KeyedLimiter<String, _> = KeyedLimiter::with_clock(&s, 1_000, clock).unwrap();
    for name in ["alice", "bob", "carol"] {
        let admitted = (0..10)
            .filter(|_| keyed.check(name, 1).unwrap().allowed)
            .count();
        assert_eq!(admitted, 3, "{name}");
    }
    assert_eq!(keyed.len(), 3);
    let refused = keyed.check("alice", 1).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(SEC));
}

#[test]
fn an_impossible_cost_is_an_error_and_changes_nothing() {
    for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::FixedWindow] {
        let clock = ManualClock::new(1_000 * SEC);
        let s = spec(algorithm, Rate::per_second(10), 5, false);
        let keyed = KeyedLimiter::<u64, _>::with_clock(&s, 100, clock).unwrap();
        assert_eq!(
            keyed.check(&7, 6),
            Err(CheckError::CostExceedsCapacity {
                cost: 6,
                capacity: 5
            })
        );
        assert!(keyed.is_empty());
        assert_eq!(keyed.check(&7, 1).unwrap().remaining, 4);
        assert!(keyed.check(&7, 6).is_err());
        assert_eq!(keyed.check(&7, 0).unwrap().remaining, 4);
    }
}

#[test]
fn the_key_count_is_capped_and_replenished_keys_are_purged() {
    for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::SlidingWindow] {
        let clock = ManualClock::new(1_000 * SEC);
        let s = spec(algorithm, Rate::per_second(10), 10, false);
        let keyed = KeyedLimiter::<u64, _>::with_shards(&s, 64, 4, clock.clone()).unwrap();
        assert_eq!(keyed.capacity(), 64);
        for k in 0..10_000u64 {
            assert!(keyed.check(&k, 1).unwrap().allowed);
            assert!(keyed.len() <= keyed.capacity());
        }
        // The newest keys are still held, with their request counted.
        assert_eq!(
            keyed.check(&9_999, 0).unwrap().remaining,
            9,
            "{algorithm:?}"
        );
        clock.advance(10 * SEC);
        assert!(keyed.purge_expired() > 0);
        assert!(keyed.is_empty(), "{algorithm:?}: {}", keyed.len());
    }
}

#[test]
fn eviction_favours_nearly_replenished_keys() {
    let clock = ManualClock::new(1_000 * SEC);
    let s = spec(AlgorithmKind::Gcra, Rate::per_second(1), 100, false);
    let keyed = KeyedLimiter::<u64, _>::with_shards(&s, 16, 1, clock.clone()).unwrap();
    // Key 0 spends its whole burst; keys 1..16 spend one unit each.
    assert!(keyed.check(&0, 100).unwrap().allowed);
    for k in 1..16u64 {
        assert!(keyed.check(&k, 1).unwrap().allowed);
    }
    // A new key makes room: the heavy user is kept.
    assert!(keyed.check(&100, 1).unwrap().allowed);
    assert!(!keyed.check(&0, 1).unwrap().allowed);
    assert!(keyed.len() <= 16);
}

#[test]
fn a_clock_stepping_back_never_admits_extra() {
    for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::FixedWindow] {
        let clock = ManualClock::new(10_000 * SEC);
        let s = spec(algorithm, Rate::per_second(10), 10, false);
        let keyed = KeyedLimiter::<u64, _>::with_clock(&s, 100, clock.clone()).unwrap();
        assert_eq!(
            (0..10)
                .filter(|_| keyed.check(&1, 1).unwrap().allowed)
                .count(),
            10
        );
        clock.set(10_000 * SEC - 3_600 * SEC);
        assert_eq!(
            (0..10)
                .filter(|_| keyed.check(&1, 1).unwrap().allowed)
                .count(),
            0
        );
    }
}

fn hammer(keyed: &Arc<KeyedLimiter<u64, ManualClock>>, keys: u64, per_thread: u64) -> Vec<u64> {
    let admitted: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(0)).collect());
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let (keyed, admitted) = (keyed.clone(), admitted.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    let key = (i + t) % keys;
                    if keyed.check(&key, 1).unwrap().allowed {
                        admitted[key as usize].fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    admitted.iter().map(|a| a.load(Ordering::Relaxed)).collect()
}

#[test]
fn threads_on_one_key_admit_exactly_the_burst() {
    for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::SlidingLog] {
        let clock = ManualClock::new(1_000 * SEC);
        let s = spec(algorithm, Rate::per_second(10), 2_000, false);
        let keyed = Arc::new(KeyedLimiter::with_clock(&s, 100, clock).unwrap());
        assert_eq!(hammer(&keyed, 1, 2_000), vec![2_000], "{algorithm:?}");
    }
}

#[test]
fn threads_on_many_keys_admit_exactly_each_burst() {
    let clock = ManualClock::new(1_000 * SEC);
    let s = spec(AlgorithmKind::Gcra, Rate::per_second(10), 50, false);
    let keyed = Arc::new(KeyedLimiter::with_shards(&s, 10_000, 8, clock).unwrap());
    let admitted = hammer(&keyed, 997, 100_000);
    assert!(admitted.iter().all(|a| *a == 50), "{admitted:?}");
}
