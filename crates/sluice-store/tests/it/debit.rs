//! Debits on the memory store (`Store::debit`: a cost settled after the
//! response, charged past what is left, into debt up to `max_debt`),
//! against the reference: sluice-core's `Limiter` driven directly on one
//! state per key (on the atomic table, GCRA's: see `decided_as`), at the
//! clock's reading. Random runs
//! of checks, debits, refunds and peeks of two keys (in different shards)
//! on a manual clock that also steps back, for every algorithm, on the
//! mutex tables and the atomic GCRA table: every decision and every
//! `charged`/`excess` must be the model's. Then the keys a debit takes in: counted as any key, and never
//! purged while in debt.

use proptest::prelude::*;
use sluice_core::{
    AlgorithmKind, Clock, Debited, Decision, LimitSpec, Limiter, Nanos, Rate, State,
};
use sluice_store::seam::{self, Counter, CounterDef, Store, now_or_never};
use sluice_store::{Check, KeyHasher, KeyId, Limit, MemoryStore};

use crate::common::{SEC, SHARDS, any_spec, decided_as, key_in_shard, shard, spec, store};

#[derive(Debug, Clone)]
enum Op {
    Advance(Nanos),
    Back(Nanos),
    /// A check of the key (0: the key the limit may keep apart, 1: another).
    Check(usize, u64),
    Debit(usize, u64, u64),
    Refund(usize, u64),
    Peek(usize, u64),
}

fn op(burst: u64) -> impl Strategy<Value = Op> {
    let max_debt = prop_oneof![Just(0), 0..=2 * burst, Just(u64::MAX)];
    prop_oneof![
        3 => (0..3 * SEC).prop_map(Op::Advance),
        1 => (0..2 * SEC).prop_map(Op::Back),
        4 => (0..2usize, 0..=burst + 1).prop_map(|(k, c)| Op::Check(k, c)),
        3 => (0..2usize, 0..=4 * burst + 2, max_debt).prop_map(|(k, a, m)| Op::Debit(k, a, m)),
        1 => (0..2usize, 0..=2 * burst).prop_map(|(k, a)| Op::Refund(k, a)),
        1 => (0..2usize, 0..=burst + 1).prop_map(|(k, c)| Op::Peek(k, c)),
    ]
}

/// One key's reference: its state.
#[derive(Default)]
struct Model {
    state: State,
}

/// The store under test, its limit for one spec and the two keys.
struct Subject {
    store: MemoryStore<sluice_core::ManualClock>,
    clock: sluice_core::ManualClock,
    counter: Counter,
    limit: std::sync::Arc<Limit>,
    keys: [KeyId; 2],
}

impl Subject {
    fn new(spec: LimitSpec) -> Self {
        let (store, clock) = store(1_000);
        let hasher = KeyHasher::random();
        let key = hasher.key_id("client");
        let other = key_in_shard(&hasher, "other", (shard(key) + 1) % SHARDS);
        let counter = store.counter(CounterDef::new("debited", spec).unwrap());
        let limit = store.limit(counter.def().id(), spec.build().unwrap());
        Self {
            store,
            clock,
            counter,
            limit,
            keys: [key, other],
        }
    }

    fn check(&self, key: usize, cost: u64) -> Option<Decision> {
        let check = seam::Check {
            counter: &self.counter,
            key: self.keys[key],
            cost,
            reserve: 0,
            lease: None,
        };
        Store::check_one_now(&self.store, &check).unwrap().ok()
    }

    fn debit(&self, key: usize, amount: u64, max_debt: u64) -> Debited {
        let debited = Store::debit(&self.store, &self.counter, self.keys[key], amount, max_debt);
        now_or_never(debited).unwrap().unwrap()
    }

    fn refund(&self, key: usize, amount: u64) -> Decision {
        let check = [seam::Check {
            counter: &self.counter,
            key: self.keys[key],
            cost: amount,
            reserve: 0,
            lease: None,
        }];
        now_or_never(Store::refund(&self.store, &check))
            .unwrap()
            .unwrap()
            .decisions[0]
    }

    fn peek(&self, key: usize, cost: u64) -> Option<Decision> {
        let check = Check {
            limit: &self.limit,
            key: self.keys[key],
            cost,
        };
        self.store.peek_one(&check).ok()
    }
}

/// Runs `ops` on a limit of `spec` (`lock_free`: the limit must take the
/// atomic table).
fn run(spec: LimitSpec, lock_free: bool, ops: &[Op]) {
    let s = Subject::new(spec);
    assert!(s.limit.is_lock_free() || !lock_free, "{spec:?}");
    let limiter = decided_as(spec, s.limit.is_lock_free());
    let mut models = [Model::default(), Model::default()];
    for (step, op) in ops.iter().enumerate() {
        let now = s.clock.now();
        match *op {
            Op::Advance(d) => s.clock.advance(d),
            Op::Back(d) => s.clock.set(now.saturating_sub(d)),
            Op::Check(k, cost) => {
                let m = &mut models[k];
                let want = limiter.check_and_apply(&mut m.state, now, cost).ok();
                assert_eq!(s.check(k, cost), want, "step {step}: {op:?}");
            }
            Op::Debit(k, amount, max_debt) => {
                let m = &mut models[k];
                let want = limiter.debit(&mut m.state, now, amount, max_debt);
                assert_eq!(s.debit(k, amount, max_debt), want, "step {step}: {op:?}");
            }
            Op::Refund(k, amount) => {
                let m = &mut models[k];
                limiter.refund(&mut m.state, now, amount);
                let want = limiter.check(&m.state, now, 0).unwrap().decision;
                assert_eq!(s.refund(k, amount), want, "step {step}: {op:?}");
            }
            Op::Peek(k, cost) => {
                let want = limiter
                    .check(&models[k].state, now, cost)
                    .ok()
                    .map(|o| o.decision);
                assert_eq!(s.peek(k, cost), want, "step {step}: {op:?}");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn debits_decide_as_the_limits_algorithm_does(
        spec in any_spec(),
        ops in prop::collection::vec(op(30), 1..60),
    ) {
        run(spec, false, &ops);
    }

    #[test]
    fn debits_on_the_atomic_table_decide_as_the_algorithm_does(
        algorithm in prop_oneof![
            Just(AlgorithmKind::Gcra),
            Just(AlgorithmKind::TokenBucket),
            Just(AlgorithmKind::LeakyBucket),
        ],
        rate in prop_oneof![
            Just(Rate::per_second(10)),
            Just(Rate::per_second(1000)),
            Just(Rate::per_minute(3)),
        ],
        (burst, ops) in (1..12u64).prop_flat_map(|b| (Just(b), prop::collection::vec(op(b), 1..60))),
    ) {
        let spec = spec(algorithm, rate, burst, algorithm == AlgorithmKind::LeakyBucket);
        run(spec, true, &ops);
    }
}

/// Every algorithm on a mutex table, and the atomic table's.
fn every_table() -> Vec<LimitSpec> {
    let mut specs: Vec<LimitSpec> = crate::common::KINDS
        .iter()
        .map(|&k| spec(k, Rate::per_second(3), 4, false))
        .collect();
    specs.push(spec(AlgorithmKind::Gcra, Rate::per_second(10), 4, false));
    specs
}

/// A key in debt stays through every purge until its debt is paid off (at
/// the algorithm's `idle_at`, later than the same key's without the debt),
/// and goes at the first purge after.
#[test]
fn a_key_in_debt_is_kept_until_its_debt_is_paid_off() {
    for spec in every_table() {
        let s = Subject::new(spec);
        let limiter: Limiter = spec.build().unwrap();
        let now = s.clock.now();
        let at = |amount: u64| {
            let mut state = State::Fresh;
            limiter.debit(&mut state, now, amount, u64::MAX);
            limiter.idle_at(&state)
        };
        let (full_burst, paid_off) = (at(4), at(4 + 6));
        assert!(full_burst < paid_off, "{spec:?}");
        assert_eq!(
            s.debit(0, 10, u64::MAX),
            Debited {
                charged: 10,
                excess: 0
            }
        );
        assert_eq!(s.limit.len(), 1, "{spec:?}: a debit takes the key in");
        s.clock.set(now + 1);
        assert!(!s.peek(0, 0).unwrap().allowed, "{spec:?}: in debt");
        for t in [now + 1, full_burst, paid_off - 1] {
            s.clock.set(t);
            assert_eq!(Store::purge_idle(&s.store), 0, "{spec:?} at {t}");
            assert_eq!(s.limit.len(), 1, "{spec:?} at {t}");
        }
        s.clock.set(paid_off);
        assert_eq!(Store::purge_idle(&s.store), 1, "{spec:?}");
        assert_eq!(s.limit.len(), 0, "{spec:?}");
    }
}

/// Keys a debit takes in count towards `max_keys` as checked keys do: the
/// table never holds more than its capacity.
#[test]
fn keys_taken_in_by_debits_count_towards_max_keys() {
    for spec in every_table() {
        let (store, _clock) = store(8);
        let counter = store.counter(CounterDef::new("debited", spec).unwrap());
        let limit = store.limit(counter.def().id(), spec.build().unwrap());
        let hasher = KeyHasher::random();
        for i in 0..64 {
            let key = hasher.key_id(&format!("k{i}"));
            let debited = now_or_never(Store::debit(&store, &counter, key, 6, 2)).unwrap();
            assert_eq!(debited.unwrap().charged, 6, "{spec:?}");
            assert!(limit.len() <= limit.capacity(), "{spec:?}: {}", limit.len());
        }
        assert!(!limit.is_empty(), "{spec:?}");
    }
}

/// A key's word on the atomic table holds a TAT below its held bit (2^63):
/// a debit that would take it further charges what fits and returns the
/// rest as excess, and the word goes on deciding (a check is not left
/// waiting for a pair that holds nothing).
#[test]
fn a_key_takes_as_much_debt_as_its_word_holds() {
    let s = Subject::new(spec(AlgorithmKind::Gcra, Rate::per_minute(3), 5, false));
    let now = s.clock.now();
    let interval = 20 * SEC;
    let fits = ((1 << 63) - 1 - now) / interval;
    let got = s.debit(0, u64::MAX, u64::MAX);
    assert_eq!(
        got,
        Debited {
            charged: fits,
            excess: u64::MAX - fits
        }
    );
    assert_eq!(
        s.debit(0, 1, u64::MAX),
        Debited {
            charged: 0,
            excess: 1
        }
    );
    let refused = s.check(0, 1).unwrap();
    assert!(!refused.allowed);
    assert!(refused.retry_after.unwrap() > (fits - 6) * interval);
    assert!(s.check(1, 1).unwrap().allowed, "another key is its own");
}

/// A counter defined `with_debt_forgiven` keeps its forgiveness on the
/// store: debt charged to a fixed window is dropped at the window's end,
/// where the same limit without it carries the debt on. Each definition
/// has its own state.
#[test]
fn a_forgiven_counter_drops_its_debt_at_the_window_end() {
    let spec = spec(AlgorithmKind::FixedWindow, Rate::per_second(4), 4, false);
    let (store, clock) = store(1_000);
    let key = KeyHasher::random().key_id("client");
    let plain = CounterDef::new("tokens", spec).unwrap();
    let forgiven = plain.clone().with_debt_forgiven(true);
    assert!(forgiven.debt_forgiven() && !plain.debt_forgiven());
    assert_ne!(plain, forgiven);
    for (def, admitted_next_window) in [(forgiven, true), (plain, false)] {
        let window_end = (clock.now() / SEC + 1) * SEC;
        let counter = store.counter(def);
        let debited = now_or_never(Store::debit(&store, &counter, key, 12, u64::MAX));
        assert_eq!(debited.unwrap().unwrap().charged, 12);
        clock.set(window_end);
        let check = [seam::Check {
            counter: &counter,
            key,
            cost: 1,
            reserve: 0,
            lease: None,
        }];
        let next = now_or_never(Store::check(&store, &check)).unwrap().unwrap();
        assert_eq!(next.allowed, admitted_next_window, "{:?}", counter.def());
    }
}
