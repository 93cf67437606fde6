//! Concurrency slots held under leases on the memory store, against a
//! small reference: a list of leases (id, slots, end) beside the slots
//! held without one. Random runs of takes, renewals and releases, with and
//! without a lease, on a manual clock that also steps back, and purges:
//! every decision must be the model's, and a lease that ends gives its
//! slots back by itself, whether a check of its key or the purge finds it.

use proptest::prelude::*;
use sluice_core::{AlgorithmKind, Clock, Nanos, Rate};
use sluice_store::seam::{Check, CounterDef, LeaseId, Store, now_or_never};
use sluice_store::{KeyHasher, KeyId};

use crate::common::{SEC, spec, store};

/// At most this many in flight.
const MAX: u64 = 4;
/// Each lease lasts this long (the limit's window: `MAX` per lease).
const LEASE: Nanos = 10 * SEC;

#[derive(Debug, Clone)]
enum Op {
    Advance(Nanos),
    Back(Nanos),
    /// Takes `cost` slots, under lease `Some(i)` or none.
    Take(Option<u64>, u64),
    /// Renews lease `i` (a check of cost 0 naming it).
    Renew(u64),
    /// Releases `cost` slots of lease `Some(i)`, or of none.
    Release(Option<u64>, u64),
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    let lease = prop_oneof![1 => Just(None), 3 => (0..4u64).prop_map(Some)];
    prop_oneof![
        3 => (0..2 * LEASE).prop_map(Op::Advance),
        1 => (0..LEASE).prop_map(Op::Back),
        4 => (lease.clone(), 1..=2u64).prop_map(|(l, c)| Op::Take(l, c)),
        2 => (0..4u64).prop_map(Op::Renew),
        3 => (lease, 1..=3u64).prop_map(|(l, c)| Op::Release(l, c)),
        1 => Just(Op::Purge),
    ]
}

/// The reference: leases as (id, slots, end), and the slots held without
/// one, at the clock's reading (a clock stepping back ends leases later).
#[derive(Default)]
struct Model {
    leases: Vec<(u64, u64, Nanos)>,
    unleased: u64,
    now: Nanos,
}

impl Model {
    fn at(&mut self, now: Nanos) {
        self.now = now;
        let t = self.now;
        self.leases.retain(|l| l.2 > t);
    }

    fn held(&self) -> u64 {
        self.unleased + self.leases.iter().map(|l| l.1).sum::<u64>()
    }

    fn take(&mut self, lease: Option<u64>, cost: u64) -> bool {
        if self.held() + cost > MAX {
            return false;
        }
        let ends = self.now + LEASE;
        match (
            lease,
            lease.and_then(|i| self.leases.iter_mut().find(|l| l.0 == i)),
        ) {
            (_, Some(l)) => {
                l.1 += cost;
                l.2 = l.2.max(ends);
            }
            (Some(i), None) => self.leases.push((i, cost, ends)),
            (None, None) => self.unleased += cost,
        }
        true
    }

    fn renew(&mut self, i: u64) {
        let ends = self.now + LEASE;
        if let Some(l) = self.leases.iter_mut().find(|l| l.0 == i) {
            l.2 = l.2.max(ends);
        }
    }

    fn release(&mut self, lease: Option<u64>, cost: u64) {
        match lease {
            Some(i) => {
                if let Some(l) = self.leases.iter_mut().find(|l| l.0 == i) {
                    l.1 -= cost.min(l.1);
                }
                self.leases.retain(|l| l.1 > 0);
            }
            // A release without a lease comes off the slots held so; the
            // table never goes below 0, so it may take a leased one's.
            None => {
                let free = cost.min(self.held());
                let own = free.min(self.unleased);
                self.unleased -= own;
                self.stolen(free - own);
            }
        }
    }

    /// A release without a lease freed slots the table counted for
    /// leases: the table's count is below the leases' until they end. The
    /// model keeps it as unleased slots owed back (negative), which the
    /// runs below never make: they release without a lease only what was
    /// taken without one.
    fn stolen(&mut self, n: u64) {
        assert_eq!(n, 0, "runs release without a lease only their own slots");
    }
}

fn lease_id(i: u64) -> LeaseId {
    LeaseId::from_u64((1 << 52) + i).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn leased_slots_match_the_model(ops in prop::collection::vec(op(), 1..60)) {
        let (store, clock) = store(1000);
        let def = CounterDef::new(
            "slots",
            spec(AlgorithmKind::Concurrency, Rate::new(MAX, LEASE).unwrap(), MAX, false),
        )
        .unwrap();
        let counter = store.counter(def);
        let key: KeyId = KeyHasher::random().key_id("k");
        let start = clock.now();
        let mut model = Model { now: start, ..Model::default() };
        let check = |cost, lease| [Check { counter: &counter, key, cost, reserve: 0, lease }];
        for op in ops {
            match op {
                Op::Advance(by) => clock.advance(by),
                Op::Back(by) => clock.set(clock.now().saturating_sub(by).max(start)),
                Op::Take(lease, cost) => {
                    model.at(clock.now());
                    let want = model.take(lease, cost);
                    let got = now_or_never(Store::check(&store, &check(cost, lease.map(lease_id))))
                        .unwrap().unwrap();
                    prop_assert_eq!(got.allowed, want, "take {:?} {}", lease, cost);
                    prop_assert_eq!(got.decisions[0].remaining, MAX - model.held());
                }
                Op::Renew(i) => {
                    model.at(clock.now());
                    model.renew(i);
                    let got = now_or_never(Store::check(&store, &check(0, Some(lease_id(i)))))
                        .unwrap().unwrap();
                    prop_assert_eq!(got.decisions[0].remaining, MAX - model.held());
                }
                Op::Release(lease, cost) => {
                    model.at(clock.now());
                    // Without a lease, only what was taken without one.
                    let cost = if lease.is_none() { cost.min(model.unleased) } else { cost };
                    model.release(lease, cost);
                    let got = now_or_never(Store::refund(&store, &check(cost, lease.map(lease_id))))
                        .unwrap().unwrap();
                    prop_assert_eq!(got.decisions[0].remaining, MAX - model.held());
                }
                Op::Purge => {
                    model.at(clock.now());
                    Store::purge_idle(&store);
                }
            }
        }
        // A lease after the latest end, every lease has ended: only the
        // unleased slots stay.
        let last = model.leases.iter().map(|l| l.2).max().unwrap_or(0);
        clock.set(last.max(clock.now()) + LEASE);
        Store::purge_idle(&store);
        let peek = now_or_never(Store::check(&store, &check(0, None))).unwrap().unwrap();
        prop_assert_eq!(peek.decisions[0].remaining, MAX - model.unleased);
    }
}

/// A release that comes twice, or after its lease ended, frees nothing:
/// never another request's slot.
#[test]
fn a_late_or_repeated_release_frees_no_one_else_s_slot() {
    let (store, clock) = store(1000);
    let def = CounterDef::new(
        "slots",
        spec(
            AlgorithmKind::Concurrency,
            Rate::new(2, LEASE).unwrap(),
            2,
            false,
        ),
    )
    .unwrap();
    let counter = store.counter(def);
    let key = KeyHasher::random().key_id("k");
    let (a, b) = (LeaseId::random(), LeaseId::random());
    let one = |lease| {
        [Check {
            counter: &counter,
            key,
            cost: 1,
            reserve: 0,
            lease: Some(lease),
        }]
    };
    let remaining = |c: sluice_store::seam::Checked| c.decisions[0].remaining;
    assert!(
        now_or_never(Store::check(&store, &one(a)))
            .unwrap()
            .unwrap()
            .allowed
    );
    clock.advance(LEASE / 2);
    assert!(
        now_or_never(Store::check(&store, &one(b)))
            .unwrap()
            .unwrap()
            .allowed
    );
    assert_eq!(
        remaining(
            now_or_never(Store::refund(&store, &one(a)))
                .unwrap()
                .unwrap()
        ),
        1
    );
    assert_eq!(
        remaining(
            now_or_never(Store::refund(&store, &one(a)))
                .unwrap()
                .unwrap()
        ),
        1,
        "twice"
    );
    clock.advance(LEASE);
    // b's lease ended: its slot came back by itself, and its late release
    // frees nothing more.
    assert_eq!(
        remaining(
            now_or_never(Store::refund(&store, &one(b)))
                .unwrap()
                .unwrap()
        ),
        2
    );
    assert!(
        now_or_never(Store::check(&store, &one(a)))
            .unwrap()
            .unwrap()
            .allowed
    );
    assert_eq!(
        remaining(
            now_or_never(Store::refund(&store, &one(b)))
                .unwrap()
                .unwrap()
        ),
        1,
        "late"
    );
}
