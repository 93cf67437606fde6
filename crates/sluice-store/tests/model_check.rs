//! Model check of the memory store's locking with shuttle.
//!
//! Built only with `RUSTFLAGS="--cfg shuttle"` (see `scripts/test`): the
//! store's shard locks and the atomic table's words are then shuttle's
//! (`src/sync.rs`), and shuttle runs each small model below under thousands
//! of schedules, chosen at random and by PCT, switching threads at every lock
//! and every atomic operation. A lock-order bug shows up as a deadlock, which
//! shuttle reports as a failure; a lost update or a commit on refusal shows
//! up as a wrong count; a lost or misread TAT shows up as a decision no
//! sequential GCRA run explains ([`Race`]). A failure prints a schedule that
//! `shuttle::replay` reproduces.
//!
//! In the [`Model`]s the clock is frozen, so nothing replenishes and every
//! count is exact. In the [`Race`]s each thread checks at its own times.

#![cfg(shuttle)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

// The helpers the integration tests share, from their one binary.
#[path = "it/common/mod.rs"]
mod common;

use std::cell::Cell;
use std::sync::Arc;

use common::{
    SEC, SHARDS, assert_all_or_nothing, checks, key_in_shard, limiter, shard, spec, store,
};
use sluice_core::{AlgorithmKind, Clock, Decision, Gcra, Limiter, Nanos, Rate};
use sluice_store::seam::{CounterDef, Store};
use sluice_store::{Check, KeyHasher, KeyId, Limit, MemoryStore, MemoryStoreConfig};

/// Schedules tried per model and per scheduler.
const SCHEDULES: usize = 2_000;

/// A small concurrent scenario: the limits (algorithm, burst), the request
/// patterns (`(limit index, key)` pairs of cost 1; a single pair goes through
/// `check_one`, more through `check`), the patterns sent one after the
/// other before the threads start (`seed`: keys already held take the
/// shared paths), which patterns each thread sends in order, and how many
/// requests must pass in all.
#[derive(Clone)]
struct Model {
    limits: Vec<(AlgorithmKind, u64)>,
    patterns: Vec<Vec<(usize, KeyId)>>,
    seed: Vec<usize>,
    threads: Vec<Vec<usize>>,
    admitted: u64,
}

impl Model {
    /// One execution: a fresh store, the seed, the threads, then the
    /// checks.
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
        let seeded: Vec<(usize, bool)> = {
            let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
            let send = |&p: &usize| (p, send(&store, &limits, &self.patterns[p]));
            self.seed.iter().map(send).collect()
        };
        let handles: Vec<_> = self
            .threads
            .iter()
            .map(|plan| {
                let (store, limits) = (store.clone(), limits.clone());
                let (patterns, plan) = (self.patterns.clone(), plan.clone());
                shuttle::thread::spawn(move || {
                    let limits: Vec<&Limit> = limits.iter().map(|l| &**l).collect();
                    plan.into_iter()
                        .map(|p| (p, send(&store, &limits, &patterns[p])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut admitted = vec![0; self.patterns.len()];
        let mut refused = vec![0; self.patterns.len()];
        let sent = handles.into_iter().flat_map(|h| h.join().unwrap());
        for (p, allowed) in sent.chain(seeded) {
            if allowed {
                admitted[p] += 1;
            } else {
                refused[p] += 1;
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

/// Sends one request of `pattern` (see [`Model`]); whether it passed.
fn send<C: Clock>(store: &MemoryStore<C>, limits: &[&Limit], pattern: &[(usize, KeyId)]) -> bool {
    let request = checks(limits, pattern);
    if let [one] = request[..] {
        return store.check_one(&one).unwrap().allowed;
    }
    let r = store.check(&request).unwrap();
    assert_eq!(r.allowed, r.decisions.iter().all(|d| d.allowed));
    r.allowed
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
        seed: vec![],
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
        seed: vec![],
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
        seed: vec![],
        threads: vec![vec![0, 0], vec![0, 0], vec![0, 0]],
        admitted: 4,
    }
    .check();
}

shuttle::thread_local! {
    /// The time of the calling model thread's next check.
    static NOW: Cell<Nanos> = const { Cell::new(0) };
}

/// A clock that tells each model thread its own time ([`NOW`]): checks of
/// one key then race at different times whatever the schedule.
struct ThreadClock;

impl Clock for ThreadClock {
    fn now(&self) -> Nanos {
        NOW.with(Cell::get)
    }
}

/// A check of `cost` for `key`, made at `t` by the calling thread.
fn at(limit: &Limit, key: KeyId, t: Nanos, cost: u64) -> Check<'_> {
    NOW.with(|now| now.set(t));
    Check { limit, key, cost }
}

/// The start of the [`Race`]s' times (a whole number of seconds).
const T: Nanos = 100_000 * SEC;

/// Two pairs of known keys on two GCRA limits, sent in opposite orders,
/// hold both words under shared locks (`decide_pair_shared`) while a third
/// thread takes the fast path on the first key. The seed's pair holds both
/// keys and leaves 2 units of `(a, k1)`, which every request meets: exactly
/// 2 more pass (as in the model above: had a unit been left, the fast path
/// was never refused and took both).
#[test]
fn held_pairs_in_opposite_orders_with_the_fast_path() {
    let (k1, k2, _) = keys();
    let (a, b) = (0, 1);
    Model {
        limits: vec![(AlgorithmKind::Gcra, 3), (AlgorithmKind::TokenBucket, 3)],
        patterns: vec![
            vec![(a, k1), (b, k2)],
            vec![(b, k2), (a, k1)],
            vec![(a, k1)],
        ],
        seed: vec![0],
        threads: vec![vec![0, 0], vec![1, 1], vec![2, 2]],
        admitted: 3,
    }
    .check();
}

/// Concurrent checks of one key, each of cost 1 at its own time, on a GCRA
/// limit of 1/s: a whole-nanosecond emission interval, so the store gives
/// it the atomic table and a known key takes the shared lock and the
/// compare-and-swap loop (`AtomicGcra::commit_after`).
///
/// What that loop guarantees: every check decides at its own time, and
/// exactly as [`Gcra::check_nanos`] at that time on a TAT that some
/// sequence of the other checks' commits left. A time earlier than the
/// one that committed that TAT (another thread's clock a little ahead)
/// only refuses more, and gives a longer `Retry-After`. So the admitted
/// checks form a chain of commits, each refused check reads the chain at
/// some point, and [`Race::explains`] asserts that some run of sequential
/// GCRA (each thread's checks in order, each at its own time) shows every
/// decision the threads were shown, field for field, and leaves the TAT
/// the store holds at the end. Sequential GCRA admits no more than its
/// burst and rate allow over any span of its times, and its `Retry-After`
/// is when the TAT it read lets the request in: so do the threads.
#[derive(Clone)]
struct Race {
    burst: u64,
    /// Checks made before the threads start, in order (through the
    /// exclusive lock, as the key is new: they only set the TAT up).
    seed: Vec<Nanos>,
    /// Each thread's checks, by time, in order.
    threads: Vec<Vec<Nanos>>,
}

/// One execution's outcome, for [`Race::explains`].
struct Shown<'a> {
    gcra: Gcra,
    /// The latest time of any check.
    last: Nanos,
    shown: &'a [Vec<Decision>],
    /// A cost-0 peek at the latest time, after every thread ended.
    end: Decision,
}

impl Race {
    /// One execution: a fresh store, the seed checks, the threads, then the
    /// invariant.
    fn run(&self) {
        let cfg = MemoryStoreConfig {
            max_keys: 1_000,
            shards: SHARDS,
        };
        let store = Arc::new(MemoryStore::with_clock(cfg, ThreadClock));
        let key = KeyHasher::from_secret(b"model").key_id("race");
        let limit = store.limit(
            "race",
            limiter(AlgorithmKind::Gcra, Rate::per_second(1), self.burst),
        );
        let Limiter::Gcra(gcra) = limit.limiter() else {
            unreachable!("a GCRA limit")
        };
        // `AtomicGcra::for_gcra`'s condition: the atomic table.
        assert!(gcra.scale() == 1 && gcra.tolerance() < 1 << 61);
        let mut tat = 0;
        for &t in &self.seed {
            let (want, next) = gcra.check_nanos(tat, t, 1).unwrap();
            assert_eq!(store.check_one(&at(&limit, key, t, 1)).unwrap(), want);
            tat = next.unwrap_or(tat);
        }
        let handles: Vec<_> = self
            .threads
            .iter()
            .map(|times| {
                let (store, limit, times) = (store.clone(), limit.clone(), times.clone());
                shuttle::thread::spawn(move || {
                    times
                        .into_iter()
                        .map(|t| store.check_one(&at(&limit, key, t, 1)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let shown: Vec<Vec<Decision>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        let last = self
            .seed
            .iter()
            .chain(self.threads.iter().flatten())
            .copied()
            .max()
            .unwrap();
        let end = store.peek_one(&at(&limit, key, last, 0)).unwrap();
        let run = Shown {
            gcra,
            last,
            shown: &shown,
            end,
        };
        assert!(
            self.explains(&run, tat, &mut vec![0; shown.len()]),
            "no sequential GCRA run at the checks' times explains {shown:#?}, \
             ending in {end:?}, for the checks at {:?} after {:?}",
            self.threads,
            self.seed,
        );
    }

    /// Whether the rest of a sequential run explains `run`: the TAT is
    /// `tat`, and thread `j` has shown its first `next[j]` decisions. Tries
    /// every thread's next check, at its own time.
    fn explains(&self, run: &Shown<'_>, tat: Nanos, next: &mut [usize]) -> bool {
        let mut done = true;
        for j in 0..self.threads.len() {
            let Some(&at) = self.threads[j].get(next[j]) else {
                continue;
            };
            done = false;
            let (decision, new_tat) = run.gcra.check_nanos(tat, at, 1).unwrap();
            if decision != run.shown[j][next[j]] {
                continue;
            }
            next[j] += 1;
            let explained = self.explains(run, new_tat.unwrap_or(tat), next);
            next[j] -= 1;
            if explained {
                return true;
            }
        }
        done && run.gcra.check_nanos(tat, run.last, 0).unwrap().0 == run.end
    }

    fn check(self) {
        let race = Arc::new(self);
        let r = race.clone();
        shuttle::check_random(move || r.run(), SCHEDULES);
        shuttle::check_pct(move || race.run(), SCHEDULES, 3);
    }
}

/// Two checks of one key a second apart, racing (burst 2, one unit used
/// at `T`, one replenished by `T + 1s`). The later one passes whatever the
/// order. The earlier one passes if it commits first; if it reads the TAT
/// the later one committed, it decides at its own time `T`, where a TAT of
/// `T + 2s` leaves no room: refused, never admitted past the burst.
#[test]
fn a_check_decides_no_earlier_than_the_tat_it_reads() {
    Race {
        burst: 2,
        seed: vec![T],
        threads: vec![vec![T], vec![T + SEC]],
    }
    .check();
}

/// Three threads at three times, one checking twice (the second time
/// earlier than its first, as another thread's clock can read), on a
/// burst of 3 with two units used: some checks pass and some are refused,
/// depending on the order they commit in.
#[test]
fn checks_of_one_key_at_three_times() {
    Race {
        burst: 3,
        seed: vec![T, T],
        threads: vec![vec![T + SEC, T], vec![T + SEC / 2], vec![T]],
    }
    .check();
}

/// A debit (`Store::debit`, into debt) racing two checks of one key on a
/// frozen clock, in the atomic table: neither is lost. The debit charges its 2 whatever the order, the checks pass while
/// units are left, and the key ends as one sequential GCRA run of every
/// unit charged leaves it (at a frozen time, the order does not change it).
#[test]
fn a_debit_racing_checks_loses_neither() {
    let run = move || {
        let (store, frozen) = store(1_000);
        let store = Arc::new(store);
        let (key, _, _) = keys();
        let spec = spec(AlgorithmKind::Gcra, Rate::per_second(1), 3, false);
        let counter = Arc::new(store.counter(CounterDef::new("debited", spec).unwrap()));
        let limit = store.limit("debited", spec.build().unwrap());
        let (s, c) = (store.clone(), counter.clone());
        let debit = shuttle::thread::spawn(move || {
            let debited = Store::debit(&*s, &c, key, 2, u64::MAX);
            sluice_store::seam::now_or_never(debited).unwrap().unwrap()
        });
        let check = || {
            store.check_one(&Check {
                limit: &limit,
                key,
                cost: 1,
            })
        };
        let admitted = (0..2).filter(|_| check().unwrap().allowed).count() as u64;
        let debited = debit.join().unwrap();
        assert_eq!((debited.charged, debited.excess), (2, 0));
        let gcra = Limiter::Gcra(Gcra::new(Rate::per_second(1), 3).unwrap());
        let mut state = sluice_core::State::Fresh;
        gcra.debit(&mut state, frozen.now(), admitted + 2, u64::MAX);
        let want = gcra.check(&state, frozen.now(), 0).unwrap().decision;
        let peek = store.peek_one(&Check {
            limit: &limit,
            key,
            cost: 0,
        });
        assert_eq!(peek.unwrap(), want, "admitted {admitted}");
    };
    shuttle::check_random(run, SCHEDULES);
    shuttle::check_pct(run, SCHEDULES, 3);
}
