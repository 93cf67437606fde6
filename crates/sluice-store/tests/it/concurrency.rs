//! The memory store under real threads: exact admission counts, all-or-nothing
//! across limits, no deadlock, and the rate bound while the clock moves.
//!
//! The counts are exact because the clock is frozen (nothing replenishes) or,
//! where it moves, the bound is one the algorithm cannot exceed however the
//! threads interleave. No assertion depends on timing; a watchdog only turns
//! a deadlock into a failure instead of a hang.

use crate::common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use common::{
    KINDS, assert_all_or_nothing, checks, key_in_shard, limiter, remaining, shard, store,
};
use sluice_core::{AlgorithmKind, Clock, Rate};
use sluice_store::{Check, KeyHasher, KeyId, Limit};

const THREADS: usize = 4;

/// Far longer than any of these tests needs, even in debug on a loaded
/// machine: only a deadlock gets there.
const DEADLOCK: Duration = Duration::from_secs(120);

/// Runs `work(thread index)` on [`THREADS`] threads released together, and
/// fails instead of hanging if they have not all finished after
/// [`DEADLOCK`].
fn hammer<F>(work: F)
where
    F: Fn(usize) + Send + Sync + 'static,
{
    let work = Arc::new(work);
    let start = Arc::new(Barrier::new(THREADS));
    let (done, finished) = mpsc::channel();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (work, start, done) = (work.clone(), start.clone(), done.clone());
            thread::spawn(move || {
                start.wait();
                work(t);
                done.send(()).unwrap();
            })
        })
        .collect();
    drop(done);
    for _ in 0..THREADS {
        match finished.recv_timeout(DEADLOCK) {
            Ok(()) => {}
            Err(RecvTimeoutError::Timeout) => {
                panic!("workers still running after {DEADLOCK:?}: deadlock")
            }
            // A worker panicked; joining reports why.
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    for h in handles {
        h.join().unwrap();
    }
}

fn counters(n: usize) -> Arc<[AtomicU64]> {
    (0..n).map(|_| AtomicU64::new(0)).collect()
}

fn loads(c: &[AtomicU64]) -> Vec<u64> {
    c.iter().map(|n| n.load(Ordering::Relaxed)).collect()
}

/// Hammers `patterns` (requests of cost 1, as `(limit index, key)` pairs)
/// from every thread, `attempts` requests each, thread `t` taking pattern
/// `(i + t) % patterns.len()` at its `i`-th request so that different orders
/// of the same locks run at once. Returns `(admitted, refused)` per pattern.
fn hammer_patterns(
    store: &Arc<sluice_store::MemoryStore<sluice_core::ManualClock>>,
    limits: &[Arc<Limit>],
    patterns: &[Vec<(usize, KeyId)>],
    attempts: usize,
) -> (Vec<u64>, Vec<u64>) {
    let admitted = counters(patterns.len());
    let refused = counters(patterns.len());
    hammer({
        let store = store.clone();
        let limits = limits.to_vec();
        let patterns = patterns.to_vec();
        let (admitted, refused) = (admitted.clone(), refused.clone());
        move |t| {
            let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
            for i in 0..attempts {
                let p = (i + t) % patterns.len();
                let request = checks(&limits, &patterns[p]);
                let r = store.check(&request).unwrap();
                assert_eq!(r.decisions.len(), request.len());
                assert_eq!(r.allowed, r.decisions.iter().all(|d| d.allowed));
                let tally = if r.allowed { &admitted } else { &refused };
                tally[p].fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (loads(&admitted), loads(&refused))
}

#[test]
fn threads_on_one_key_admit_exactly_the_burst_under_every_algorithm() {
    const BURST: u64 = 1_000;
    const ATTEMPTS: u64 = 500; // per thread: twice the burst in all
    for kind in KINDS {
        let (store, _frozen) = store(1_000);
        let store = Arc::new(store);
        let limit = store.limit("l", limiter(kind, Rate::per_second(100), BURST));
        let key = KeyHasher::from_secret(b"t").key_id("shared");
        let admitted = Arc::new(AtomicU64::new(0));
        hammer({
            let (store, limit, admitted) = (store.clone(), limit.clone(), admitted.clone());
            move |_| {
                let check = Check {
                    limit: &limit,
                    key,
                    cost: 1,
                };
                let n = (0..ATTEMPTS)
                    .filter(|_| store.check_one(&check).unwrap().allowed)
                    .count() as u64;
                admitted.fetch_add(n, Ordering::Relaxed);
            }
        });
        assert_eq!(admitted.load(Ordering::Relaxed), BURST, "{kind:?}");
        assert_eq!(remaining(&store, &limit, key), 0, "{kind:?}");
        assert_eq!(limit.len(), 1, "{kind:?}");
    }
}

#[test]
fn two_limits_on_one_key_in_both_orders_admit_the_smaller_burst_and_charge_both_alike() {
    const LARGE: u64 = 3_000;
    const SMALL: u64 = 2_000;
    // Every algorithm is the large limit once and the small one once.
    for (i, large_kind) in KINDS.into_iter().enumerate() {
        let small_kind = KINDS[(i + 1) % KINDS.len()];
        let (store, _frozen) = store(1_000);
        let store = Arc::new(store);
        let limits = [
            store.limit("large", limiter(large_kind, Rate::per_second(10), LARGE)),
            store.limit("small", limiter(small_kind, Rate::per_second(10), SMALL)),
        ];
        let key = KeyHasher::from_secret(b"t").key_id("shared");
        let patterns = vec![vec![(0, key), (1, key)], vec![(1, key), (0, key)]];
        let (admitted, refused) = hammer_patterns(&store, &limits, &patterns, 1_000);
        let what = format!("{large_kind:?} {LARGE} / {small_kind:?} {SMALL}");
        assert_eq!(admitted.iter().sum::<u64>(), SMALL, "{what}");
        assert_eq!(remaining(&store, &limits[0], key), LARGE - SMALL, "{what}");
        assert_eq!(remaining(&store, &limits[1], key), 0, "{what}");
        let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
        assert_all_or_nothing(&store, &limits, &patterns, &admitted, &refused);
    }
}

#[test]
fn overlapping_requests_in_different_orders_never_deadlock_and_stay_all_or_nothing() {
    let (store, _frozen) = store(1_000);
    let store = Arc::new(store);
    let h = KeyHasher::from_secret(b"t");
    // Two keys in different shards, and a third sharing the first's shard:
    // locks cross both between limits and between shards of one limit, and
    // one request needs the same shard twice (it must lock it once).
    let k1 = key_in_shard(&h, "one", 0);
    let k2 = key_in_shard(&h, "two", 1);
    let k3 = key_in_shard(&h, "three", 0);
    assert!(k1 != k3 && shard(k1) == shard(k3) && shard(k1) != shard(k2));
    let (a, b, c) = (0, 1, 2);
    let limits = [
        store.limit(
            "a",
            limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 4_000),
        ),
        store.limit(
            "b",
            limiter(AlgorithmKind::Gcra, Rate::per_second(10), 3_000),
        ),
        store.limit(
            "c",
            limiter(AlgorithmKind::SlidingWindow, Rate::per_second(10), 3_500),
        ),
    ];
    // Every request meets (b, k2), the tightest pair; no other pair can run
    // out before it, so exactly its burst passes, whatever the interleaving.
    let patterns = vec![
        vec![(a, k1), (b, k2)],
        vec![(b, k2), (a, k1)],
        vec![(a, k2), (b, k2), (a, k1)],
        vec![(a, k1), (b, k2), (a, k2)],
        vec![(c, k1), (a, k3), (b, k2), (a, k1)],
        vec![(b, k2), (c, k1), (a, k2)],
    ];
    let (admitted, refused) = hammer_patterns(&store, &limits, &patterns, 1_000);
    assert_eq!(admitted.iter().sum::<u64>(), 3_000);
    assert_eq!(refused.iter().sum::<u64>(), THREADS as u64 * 1_000 - 3_000);
    let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
    assert_all_or_nothing(&store, &limits, &patterns, &admitted, &refused);
}

/// Runs the workers against a fresh limit of `kind` on one key while another
/// thread moves the clock forward in small steps, then checks alone that no
/// request within quota is refused. Returns how many the workers got
/// through, and the virtual times `start` and `end` that bracket every one
/// of their decisions.
fn hammer_while_the_clock_runs(kind: AlgorithmKind, rate: Rate, burst: u64) -> (u64, u64, u64) {
    const ATTEMPTS: u64 = 4_000; // per thread
    const STEP: u64 = 100_000; // 100 µs of virtual time per tick
    let (store, clock) = store(1_000);
    let store = Arc::new(store);
    let limit = store.limit("l", limiter(kind, rate, burst));
    let key = KeyHasher::from_secret(b"t").key_id("k");
    let start = clock.now();
    let admitted = Arc::new(AtomicU64::new(0));
    let workers_done = Arc::new(AtomicU64::new(0));
    let ticker = thread::spawn({
        let (clock, workers_done) = (clock.clone(), workers_done.clone());
        move || {
            while workers_done.load(Ordering::Acquire) < THREADS as u64 {
                clock.advance(STEP);
                thread::yield_now();
            }
        }
    });
    hammer({
        let (store, limit) = (store.clone(), limit.clone());
        let (admitted, workers_done) = (admitted.clone(), workers_done.clone());
        move |_| {
            let check = Check {
                limit: &limit,
                key,
                cost: 1,
            };
            let n = (0..ATTEMPTS)
                .filter(|_| store.check_one(&check).unwrap().allowed)
                .count() as u64;
            admitted.fetch_add(n, Ordering::Relaxed);
            workers_done.fetch_add(1, Ordering::Release);
        }
    });
    ticker.join().unwrap();
    let end = clock.now();
    let admitted = admitted.load(Ordering::Relaxed);

    // Then, alone and on a still clock: what a peek says is left passes in
    // full and not one more (a request within quota is never refused) ...
    let one = || {
        store.check_one(&Check {
            limit: &limit,
            key,
            cost: 1,
        })
    };
    let left = remaining(&store, &limit, key);
    for i in 0..left {
        assert!(
            one().unwrap().allowed,
            "{kind:?}: {i} of {left} left refused"
        );
    }
    assert!(!one().unwrap().allowed, "{kind:?}: more than {left} left");
    // ... and once every window has passed, the whole burst is back.
    clock.advance(2 * window(rate, burst) + 1);
    for i in 0..burst {
        assert!(
            one().unwrap().allowed,
            "{kind:?}: {i} of a full burst refused"
        );
    }
    assert!(!one().unwrap().allowed, "{kind:?}: more than a full burst");
    (admitted, start, end)
}

/// The time for an empty limit to fill: the window length.
fn window(rate: Rate, burst: u64) -> u64 {
    (burst * rate.period()).div_ceil(rate.amount())
}

#[test]
fn a_moving_clock_never_lets_more_than_the_rate_through() {
    // 1 per ms and a burst of 50: windows of exactly 50 ms.
    let rate = Rate::per_second(1_000);
    let burst = 50;
    let w = window(rate, burst);
    for kind in KINDS {
        let (admitted, start, end) = hammer_while_the_clock_runs(kind, rate, burst);
        let elapsed = end - start;
        let most = match kind {
            // A full bucket plus what drained meanwhile.
            AlgorithmKind::TokenBucket | AlgorithmKind::LeakyBucket | AlgorithmKind::Gcra => {
                burst + elapsed * rate.amount() / rate.period()
            }
            // At most `burst` per fixed window touched: the counter limits
            // the window's own count to the burst.
            AlgorithmKind::FixedWindow | AlgorithmKind::SlidingWindow => {
                burst * (end / w - start / w + 1)
            }
            // At most `burst` in any `w` consecutive nanoseconds.
            AlgorithmKind::SlidingLog => burst * (elapsed / w + 1),
            // Not a rate: not among `KINDS`.
            AlgorithmKind::Concurrency => burst,
        };
        // And at least the burst: a limit that has admitted less than its
        // burst in all has room for one more, so with more attempts than the
        // burst, every refusal comes after the burst has passed.
        assert!(
            (burst..=most).contains(&admitted),
            "{kind:?}: {admitted} admitted in {elapsed} ns, expected {burst}..={most}"
        );
    }
}

#[test]
fn many_keys_each_admit_exactly_their_burst() {
    const KEYS: usize = 10_000;
    const BURST: u64 = 3;
    const PASSES: usize = 2; // per thread and key: 8 tries for 3 admissions
    let h = KeyHasher::from_secret(b"t");
    let keys: Arc<[KeyId]> = (0..KEYS).map(|i| h.key_id(&format!("key{i}"))).collect();
    for kind in KINDS {
        let (store, _frozen) = store(1_000_000);
        let store = Arc::new(store);
        let limit = store.limit("l", limiter(kind, Rate::per_second(1), BURST));
        let admitted = counters(KEYS);
        hammer({
            let (store, limit, keys) = (store.clone(), limit.clone(), keys.clone());
            let admitted = admitted.clone();
            move |t| {
                // Every thread walks all keys, from a different place.
                for i in 0..KEYS * PASSES {
                    let k = (i + t * KEYS / THREADS) % KEYS;
                    let check = Check {
                        limit: &limit,
                        key: keys[k],
                        cost: 1,
                    };
                    if store.check_one(&check).unwrap().allowed {
                        admitted[k].fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        let admitted = loads(&admitted);
        let wrong: Vec<_> = (0..KEYS).filter(|&k| admitted[k] != BURST).collect();
        assert!(
            wrong.is_empty(),
            "{kind:?}: {} keys did not admit exactly {BURST}, e.g. key {} admitted {}",
            wrong.len(),
            wrong[0],
            admitted[wrong[0]]
        );
        assert_eq!(limit.len(), KEYS, "{kind:?}: no key was evicted");
        assert_eq!(remaining(&store, &limit, keys[0]), 0, "{kind:?}");
    }
}

#[test]
fn many_keys_under_two_limits_each_admit_the_smaller_burst() {
    const KEYS: usize = 2_000;
    let h = KeyHasher::from_secret(b"t");
    let keys: Arc<[KeyId]> = (0..KEYS).map(|i| h.key_id(&format!("key{i}"))).collect();
    let (store, _frozen) = store(1_000_000);
    let store = Arc::new(store);
    let limits = [
        store.limit(
            "large",
            limiter(AlgorithmKind::SlidingLog, Rate::per_second(1), 5),
        ),
        store.limit(
            "small",
            limiter(AlgorithmKind::FixedWindow, Rate::per_second(1), 3),
        ),
    ];
    let admitted = counters(KEYS);
    hammer({
        let (store, limits, keys) = (store.clone(), limits.clone(), keys.clone());
        let admitted = admitted.clone();
        move |t| {
            for i in 0..KEYS * 2 {
                let k = (i + t * KEYS / THREADS) % KEYS;
                let (x, y) = if (i + t) % 2 == 0 { (0, 1) } else { (1, 0) };
                let request = [
                    Check {
                        limit: &limits[x],
                        key: keys[k],
                        cost: 1,
                    },
                    Check {
                        limit: &limits[y],
                        key: keys[k],
                        cost: 1,
                    },
                ];
                if store.check(&request).unwrap().allowed {
                    admitted[k].fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    });
    let admitted = loads(&admitted);
    for (k, key) in keys.iter().enumerate() {
        assert_eq!(admitted[k], 3, "key {k}");
        assert_eq!(
            remaining(&store, &limits[0], *key),
            2,
            "key {k}: charged once per admission"
        );
        assert_eq!(remaining(&store, &limits[1], *key), 0, "key {k}");
    }
}
