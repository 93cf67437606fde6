//! The memory store's GCRA table (one atomic word per key under a shared
//! lock, for whole-nanosecond intervals), which also runs the algorithms
//! that decide as GCRA does (the token bucket, the leaky bucket with
//! `nodelay`), against the reference: sluice-core's algorithm of the limit
//! on one state (on the atomic table, GCRA's: see `decided_as`), at the
//! clock's reading. Single checks,
//! all-or-nothing pairs with a partner limit (atomic or not, locked first or
//! second), refunds and peeks, and checks of a second key, on a manual
//! clock that also steps back; every decision must be the model's.

use proptest::prelude::*;
use sluice_core::{AlgorithmKind, Clock, Decision, Limiter, Nanos, Rate, State};
use sluice_store::{Check, KeyHasher, Limit};

use crate::common::{SHARDS, decided_as, key_in_shard, lock_free_cases, shard, spec, store};

#[derive(Debug, Clone)]
enum Op {
    Advance(Nanos),
    Back(Nanos),
    One(u64),
    Pair(u64, u64),
    Refund(u64),
    Peek(u64),
    /// A check of another key than the one the limit may keep apart.
    Other(u64),
}

fn op(burst: u64) -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..3_000_000_000u64).prop_map(Op::Advance),
        1 => (0..2_000_000_000u64).prop_map(Op::Back),
        4 => (0..=burst + 1).prop_map(Op::One),
        2 => ((0..=burst + 1), (0..=4u64)).prop_map(|(a, b)| Op::Pair(a, b)),
        1 => (0..=burst + 1).prop_map(Op::Refund),
        1 => (0..=burst + 1).prop_map(Op::Peek),
        1 => (0..=burst + 1).prop_map(Op::Other),
    ]
}

/// One limit's reference: its state for the key.
struct Model {
    limiter: Limiter,
    state: State,
}

impl Model {
    fn new(limiter: Limiter) -> Self {
        Self {
            limiter,
            state: State::Fresh,
        }
    }

    /// A peek at `now`.
    fn peek(&self, now: Nanos, cost: u64) -> Option<Decision> {
        self.limiter
            .check(&self.state, now, cost)
            .ok()
            .map(|o| o.decision)
    }
}

/// The pair's partner limit: a token bucket (an atomic table too) or a
/// leaky bucket that delays (a mutex table); registered before or after
/// the limit under test (which orders their locks either way).
#[derive(Debug, Clone, Copy)]
struct Partner {
    atomic: bool,
    first: bool,
}

/// Runs `ops` on the limit under test.
fn run(algorithm: AlgorithmKind, rate: Rate, burst: u64, partner: Partner, ops: &[Op]) {
    use sluice_store::seam::{CounterDef, Store};
    let (store, clock) = store(1_000);
    let spec = spec(
        algorithm,
        rate,
        burst,
        algorithm == AlgorithmKind::LeakyBucket,
    );
    let gcra = spec.build().unwrap();
    let partner_spec = if partner.atomic {
        crate::common::spec(AlgorithmKind::TokenBucket, Rate::per_second(5), 3, false)
    } else {
        crate::common::spec(AlgorithmKind::LeakyBucket, Rate::per_second(5), 3, false)
    };
    let bucket = partner_spec.build().unwrap();
    let hasher = KeyHasher::random();
    let key = hasher.key_id("client");
    // Another key, in another shard.
    let other = key_in_shard(&hasher, "other", (shard(key) + 1) % SHARDS);
    // The state of the limit under test, as the seam names it (for
    // refunds): registered first, so that `a` below is the same.
    let def = CounterDef::new("gcra", spec).unwrap();
    let (counter, b) = if partner.first {
        let b = store.limit("bucket", bucket);
        (store.counter(def), b)
    } else {
        (store.counter(def), store.limit("bucket", bucket))
    };
    let a = store.limit("gcra", gcra);
    assert_eq!(b.is_lock_free(), partner.atomic);
    let decided = decided_as(spec, a.is_lock_free());
    let (mut ma, mut mb) = (
        Model::new(decided),
        Model::new(decided_as(partner_spec, partner.atomic)),
    );
    let mut mo = Model::new(decided);
    fn check(limit: &Limit, key: sluice_store::KeyId, cost: u64) -> Check<'_> {
        Check { limit, key, cost }
    }
    for (step, op) in ops.iter().enumerate() {
        let now = clock.now();
        match *op {
            Op::Advance(d) => clock.advance(d),
            Op::Back(d) => clock.set(now.saturating_sub(d)),
            Op::One(cost) => {
                let got = store.check_one(&check(&a, key, cost)).ok();
                let want = ma.limiter.check_and_apply(&mut ma.state, now, cost).ok();
                assert_eq!(got, want, "step {step}: {op:?}");
            }
            Op::Pair(ca, cb) => {
                let got = store
                    .check(&[check(&a, key, ca), check(&b, key, cb)])
                    .ok()
                    .map(|c| (c.allowed, c.decisions.to_vec()));
                let t = now;
                let want = match (ma.peek(t, ca), mb.peek(t, cb)) {
                    (Some(da), Some(db)) => {
                        let allowed = da.allowed && db.allowed;
                        let shown = |m: &mut Model, d: Decision, cost: u64| {
                            if allowed {
                                m.limiter.check_and_apply(&mut m.state, t, cost).unwrap()
                            } else if d.allowed {
                                m.peek(t, 0).unwrap()
                            } else {
                                d
                            }
                        };
                        let da = shown(&mut ma, da, ca);
                        let db = shown(&mut mb, db, cb);
                        Some((allowed, vec![da, db]))
                    }
                    _ => None,
                };
                assert_eq!(got, want, "step {step}: {op:?}");
            }
            Op::Refund(amount) => {
                let got = store
                    .refund_now(&[sluice_store::seam::Check {
                        counter: &counter,
                        key,
                        cost: amount,
                        reserve: 0,
                        lease: None,
                    }])
                    .unwrap()
                    .decisions[0];
                ma.limiter.refund(&mut ma.state, now, amount);
                assert_eq!(Some(got), ma.peek(now, 0), "step {step}: {op:?}");
            }
            Op::Peek(cost) => {
                let got = store.peek_one(&check(&a, key, cost)).ok();
                assert_eq!(got, ma.peek(now, cost), "step {step}: {op:?}");
            }
            Op::Other(cost) => {
                let got = store.check_one(&check(&a, other, cost)).ok();
                let want = mo.limiter.check_and_apply(&mut mo.state, now, cost).ok();
                assert_eq!(got, want, "step {step}: {op:?}");
            }
        }
    }
}

#[test]
fn gcra_equivalents_with_whole_nanosecond_intervals_take_the_atomic_table() {
    let (store, _) = store(100);
    for (i, (s, lock_free)) in lock_free_cases().into_iter().enumerate() {
        let limit = store.limit(&format!("limit-{i}"), s.build().unwrap());
        assert_eq!(limit.is_lock_free(), lock_free, "{s:?}");
        assert_eq!(
            limit.limiter(),
            s.build().unwrap(),
            "reported as registered"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn the_atomic_gcra_table_decides_as_the_limits_algorithm_does(
        algorithm in prop_oneof![
            Just(AlgorithmKind::Gcra),
            Just(AlgorithmKind::TokenBucket),
            Just(AlgorithmKind::LeakyBucket),
        ],
        rate in prop_oneof![
            Just(Rate::per_second(10)),
            Just(Rate::per_second(1000)),
            Just(Rate::per_minute(3)),
            // Not a whole number of nanoseconds: the mutex table.
            Just(Rate::per_second(7)),
        ],
        (burst, ops) in (1..12u64).prop_flat_map(|b| (Just(b), prop::collection::vec(op(b), 1..60))),
        (atomic, first) in (any::<bool>(), any::<bool>()),
    ) {
        run(algorithm, rate, burst, Partner { atomic, first }, &ops);
    }
}
