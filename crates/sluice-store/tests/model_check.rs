//! Model check of the memory store's locking with shuttle.
//!
//! Built only with `RUSTFLAGS="--cfg shuttle"` (see `scripts/test`): the
//! store's shard locks are then shuttle's (`src/sync.rs`), and shuttle runs
//! each small model below under thousands of schedules, chosen at random and
//! by PCT, switching threads at every lock. A lock-order bug shows up as a
//! deadlock, which shuttle reports as a failure; a lost update or a commit on
//! refusal shows up as a wrong count. A failure prints a schedule that
//! `shuttle::replay` reproduces.
//!
//! The clock is frozen, so nothing replenishes and every count is exact.

#![cfg(shuttle)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The helpers the integration tests share, from their one binary.
#[path = "it/common/mod.rs"]
mod common;

use std::sync::Arc;

use common::{assert_all_or_nothing, checks, key_in_shard, limiter, shard, store};
use sluice_core::{AlgorithmKind, Rate};
use sluice_store::{KeyHasher, KeyId, Limit};

/// Schedules tried per model and per scheduler.
const SCHEDULES: usize = 2_000;

/// A small concurrent scenario: the limits (algorithm, burst), the request
/// patterns (`(limit index, key)` pairs of cost 1; a single pair goes through
/// `check_one`, more through `check`), which patterns each thread sends in
/// order, and how many requests must pass in all.
#[derive(Clone)]
struct Model {
    limits: Vec<(AlgorithmKind, u64)>,
    patterns: Vec<Vec<(usize, KeyId)>>,
    threads: Vec<Vec<usize>>,
    admitted: u64,
}

impl Model {
    /// One execution: a fresh store, the threads, then the checks.
    fn run(&self) {
        let (store, _frozen) = store(1_000);
        let store = Arc::new(store);
        let limits: Vec<Arc<Limit>> = self
            .limits
            .iter()
            .enumerate()
            .map(|(i, &(kind, burst))| {
                store.limit(&format!("l{i}"), limiter(kind, Rate::per_second(1), burst))
            })
            .collect();
        let handles: Vec<_> = self
            .threads
            .iter()
            .map(|plan| {
                let (store, limits) = (store.clone(), limits.clone());
                let (patterns, plan) = (self.patterns.clone(), plan.clone());
                shuttle::thread::spawn(move || {
                    let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
                    plan.into_iter()
                        .map(|p| {
                            let request = checks(&limits, &patterns[p]);
                            let allowed = if let [one] = request[..] {
                                store.check_one(&one).unwrap().allowed
                            } else {
                                let r = store.check(&request).unwrap();
                                assert_eq!(r.allowed, r.decisions.iter().all(|d| d.allowed));
                                r.allowed
                            };
                            (p, allowed)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut admitted = vec![0; self.patterns.len()];
        let mut refused = vec![0; self.patterns.len()];
        for h in handles {
            for (p, allowed) in h.join().unwrap() {
                if allowed {
                    admitted[p] += 1;
                } else {
                    refused[p] += 1;
                }
            }
        }
        assert_eq!(admitted.iter().sum::<u64>(), self.admitted);
        let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
        assert_all_or_nothing(&store, &limits, &self.patterns, &admitted, &refused);
    }

    fn check(self) {
        let model = Arc::new(self);
        let m = model.clone();
        shuttle::check_random(move || m.run(), SCHEDULES);
        shuttle::check_pct(move || model.run(), SCHEDULES, 3);
    }
}

/// Keys in shards 0, 1 and 0 again.
fn keys() -> (KeyId, KeyId, KeyId) {
    let h = KeyHasher::from_secret(b"model");
    let k1 = key_in_shard(&h, "one", 0);
    let k2 = key_in_shard(&h, "two", 1);
    let k3 = key_in_shard(&h, "three", 0);
    assert!(k1 != k3 && shard(k1) == shard(k3) && shard(k1) != shard(k2));
    (k1, k2, k3)
}

/// Two threads lock two limits in opposite orders while a third takes the
/// fast path on the tighter pair.
///
/// Every request meets `(a, k1)`, burst 3, so at most 3 pass; and exactly 3:
/// were one of its units left at the end, the fast path was never refused
/// (2 passed), so no request of both limits passed, so `(b, k2)` was never
/// charged and could not have refused one either.
#[test]
fn opposite_orders_across_limits_with_the_fast_path() {
    let (k1, k2, _) = keys();
    let (a, b) = (0, 1);
    Model {
        limits: vec![(AlgorithmKind::TokenBucket, 3), (AlgorithmKind::Gcra, 2)],
        patterns: vec![
            vec![(a, k1), (b, k2)],
            vec![(b, k2), (a, k1)],
            vec![(a, k1)],
        ],
        threads: vec![vec![0, 0], vec![1, 1], vec![2, 2]],
        admitted: 3,
    }
    .check();
}

/// Opposite orders over the shards of one limit, and a request that names
/// one shard twice (it must lock it once) beside two more limits.
///
/// Every request meets `(a, k1)` and `(a, k2)`, burst 2: exactly 2 pass.
#[test]
fn opposite_orders_across_shards_of_one_limit() {
    let (k1, k2, k3) = keys();
    let (a, b, c) = (0, 1, 2);
    Model {
        limits: vec![
            (AlgorithmKind::FixedWindow, 2),
            (AlgorithmKind::SlidingLog, 3),
            (AlgorithmKind::SlidingWindow, 3),
        ],
        patterns: vec![
            vec![(a, k1), (a, k2)],
            vec![(a, k2), (a, k1), (b, k3)],
            vec![(c, k1), (a, k3), (a, k2), (a, k1)],
        ],
        threads: vec![vec![0, 0], vec![1, 1], vec![2, 2]],
        admitted: 2,
    }
    .check();
}

/// The fast path alone: three threads on one key of a leaky bucket of 4
/// admit exactly 4 of 6.
#[test]
fn the_fast_path_on_one_key() {
    let (k1, _, _) = keys();
    Model {
        limits: vec![(AlgorithmKind::LeakyBucket, 4)],
        patterns: vec![vec![(0, k1)]],
        threads: vec![vec![0, 0], vec![0, 0], vec![0, 0]],
        admitted: 4,
    }
    .check();
}
