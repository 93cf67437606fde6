//! What the fallback admitted while Redis could not decide: owed to Redis,
//! and charged there when it is back, before Redis decides for that key
//! again.
//!
//! Without it, a key that spent its quota locally during an outage would
//! get a fresh one from Redis as soon as Redis returned (a restarted Redis
//! has forgotten every key), and every instance's local admissions would
//! come on top of the global limit. With it, Redis is told, so over an
//! outage and its recovery the total admitted for a key stays within the
//! global limit plus what the instances' fallback shares admitted during
//! the outage (and within the global limit alone when Redis still had
//! that much left).
//!
//! A charge is clamped at what the limit has left: a limit's state never
//! goes below empty (a refused check charges nothing, so the owed cost is
//! charged whole if it fits, else what is left).
//!
//! The ledger is bounded: at most `max` (limit, key) entries. When it is
//! full, admissions for new pairs are not recorded and are counted as
//! dropped (`dropped`); a pair already owed keeps adding up.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_core::Limiter;
use sluice_store::KeyId;

use crate::shared::{SharedCheck, limit_tag};

/// The cost owed to Redis for one limit and key.
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    /// The limit's identity, as Redis key names use it.
    pub(crate) limit_id: Arc<str>,
    /// Its algorithm.
    pub(crate) limiter: Limiter,
    /// Its capacity: no charge is larger.
    pub(crate) burst: u64,
    /// The client key's keyed hash.
    pub(crate) key: KeyId,
    /// The cost admitted by the fallback and not yet charged.
    pub(crate) cost: u64,
}

/// What the fallback admitted and Redis has not been told. See the module
/// docs.
#[derive(Debug)]
pub(crate) struct Ledger {
    owed: Mutex<HashMap<(u64, KeyId), Owed>>,
    /// Whether anything is owed: the one load a decision pays while nothing
    /// is.
    any: AtomicBool,
    max: usize,
    /// Admissions not recorded because the ledger was full.
    pub(crate) dropped: AtomicU64,
    /// Cost charged to Redis after an outage.
    pub(crate) settled: AtomicU64,
}

impl Ledger {
    /// An empty ledger of at most `max` (limit, key) entries.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            owed: Mutex::new(HashMap::new()),
            any: AtomicBool::new(false),
            max: max.max(1),
            dropped: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        }
    }

    /// Whether anything is owed.
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Records the checks of a request the fallback admitted.
    pub(crate) fn owe(&self, checks: &[SharedCheck<'_>]) {
        let mut owed = self.owed.lock();
        for c in checks.iter().filter(|c| c.cost > 0) {
            self.add(&mut owed, c.cost, || Owed {
                limit_id: c.limit_id.into(),
                limiter: *c.limiter,
                burst: c.spec.burst,
                key: c.key,
                cost: 0,
            });
        }
        self.any.store(!owed.is_empty(), Ordering::Release);
    }

    /// Adds `cost` to a pair's entry (made by `entry` if new), or counts it
    /// dropped when a new pair finds the ledger full.
    fn add(&self, owed: &mut HashMap<(u64, KeyId), Owed>, cost: u64, entry: impl FnOnce() -> Owed) {
        let new = entry();
        let full = owed.len() >= self.max;
        match owed.entry((limit_tag(&new.limit_id), new.key)) {
            Entry::Occupied(mut e) => {
                let o = e.get_mut();
                o.cost = o.cost.saturating_add(cost);
            }
            Entry::Vacant(_) if full => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            Entry::Vacant(e) => {
                e.insert(Owed { cost, ..new });
            }
        }
    }

    /// Takes what is owed for these checks' (limit, key) pairs.
    pub(crate) fn take_for(&self, checks: &[SharedCheck<'_>]) -> Vec<Owed> {
        let mut owed = self.owed.lock();
        let taken = checks
            .iter()
            .filter_map(|c| owed.remove(&(limit_tag(c.limit_id), c.key)))
            .collect();
        self.any.store(!owed.is_empty(), Ordering::Release);
        taken
    }

    /// Takes up to `n` owed entries, any of them.
    pub(crate) fn take_some(&self, n: usize) -> Vec<Owed> {
        let mut owed = self.owed.lock();
        let keys: Vec<(u64, KeyId)> = owed.keys().take(n).copied().collect();
        let taken = keys.iter().filter_map(|k| owed.remove(k)).collect();
        self.any.store(!owed.is_empty(), Ordering::Release);
        taken
    }

    /// Puts back what could not be charged (Redis failed again).
    pub(crate) fn put_back(&self, entries: Vec<Owed>) {
        let mut owed = self.owed.lock();
        for o in entries {
            self.add(&mut owed, o.cost, || o);
        }
        self.any.store(!owed.is_empty(), Ordering::Release);
    }

    /// How many (limit, key) pairs are owed.
    pub(crate) fn len(&self) -> usize {
        self.owed.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};

    fn spec() -> LimitSpec {
        LimitSpec {
            algorithm: AlgorithmKind::TokenBucket,
            rate: Rate::per_second(1),
            burst: 10,
            nodelay: false,
        }
    }

    fn check<'a>(
        spec: &'a LimitSpec,
        limiter: &'a Limiter,
        key: u128,
        cost: u64,
    ) -> SharedCheck<'a> {
        SharedCheck {
            limit_id: "a",
            spec,
            limiter,
            key: KeyId(key),
            cost,
            reserve: 0,
        }
    }

    #[test]
    fn costs_add_up_per_pair_and_are_taken_once() {
        let spec = spec();
        let limiter = Limiter::new(&spec).unwrap();
        let l = Ledger::new(10);
        assert!(l.is_empty());
        l.owe(&[check(&spec, &limiter, 1, 2)]);
        l.owe(&[check(&spec, &limiter, 1, 3), check(&spec, &limiter, 2, 1)]);
        assert!(!l.is_empty());
        let taken = l.take_for(&[check(&spec, &limiter, 1, 1)]);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].cost, 5);
        assert!(
            l.take_for(&[check(&spec, &limiter, 1, 1)]).is_empty(),
            "taken once"
        );
        assert_eq!(l.take_some(10).len(), 1);
        assert!(l.is_empty());
        l.put_back(taken);
        assert_eq!(l.len(), 1);
        assert!(!l.is_empty());
    }

    #[test]
    fn a_full_ledger_drops_new_pairs_and_counts_them() {
        let spec = spec();
        let limiter = Limiter::new(&spec).unwrap();
        let l = Ledger::new(2);
        for key in 0..5 {
            l.owe(&[check(&spec, &limiter, key, 1)]);
        }
        assert_eq!(l.len(), 2);
        assert_eq!(l.dropped.load(Ordering::Relaxed), 3);
        // A pair already owed still adds up.
        l.owe(&[check(&spec, &limiter, 0, 4)]);
        let all = l.take_some(10);
        assert_eq!(all.iter().map(|o| o.cost).sum::<u64>(), 6);
    }
}
