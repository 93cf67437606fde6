//! What the fallback admitted while the remote store could not decide: owed to the remote store,
//! and charged there when it is back, before it decides for that key
//! again.
//!
//! Without it, a key that spent its quota locally during an outage would
//! get a fresh one from the store as soon as it returned (a restarted store
//! has forgotten every key), and every instance's local admissions would
//! come on top of the global limit. With it, the store is told, so over an
//! outage and its recovery the total admitted for a key stays within the
//! global limit plus what the instances' fallback shares admitted during
//! the outage (and within the global limit alone when the store still had
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_store::KeyId;
use sluice_store::seam::Counter;

/// The cost owed to the remote store for one limit and key.
#[derive(Debug, Clone)]
pub(crate) struct Owed {
    /// The limit's counter in the remote store.
    pub(crate) counter: Counter,
    /// The client key's keyed hash.
    pub(crate) key: KeyId,
    /// The cost admitted by the fallback and not yet charged.
    pub(crate) cost: u64,
}

impl Owed {
    /// The limit's capacity: no charge is larger.
    pub(crate) fn burst(&self) -> u64 {
        self.counter.def().spec().burst
    }
}

/// What the fallback admitted and the remote store has not been told. See the module
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
    /// Cost charged to the remote store after an outage.
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

    /// Records what the fallback admitted: `(remote counter, key, cost)`
    /// for each check of a request.
    pub(crate) fn owe<'a>(&self, admitted: impl IntoIterator<Item = (&'a Counter, KeyId, u64)>) {
        let mut owed = self.owed.lock();
        for (counter, key, cost) in admitted.into_iter().filter(|(_, _, cost)| *cost > 0) {
            self.add(&mut owed, cost, || Owed {
                counter: counter.clone(),
                key,
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
        match owed.entry((new.counter.def().tag(), new.key)) {
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

    /// Takes what is owed for these (limit tag, key) pairs.
    pub(crate) fn take_for(&self, pairs: impl IntoIterator<Item = (u64, KeyId)>) -> Vec<Owed> {
        let mut owed = self.owed.lock();
        let taken = pairs.into_iter().filter_map(|p| owed.remove(&p)).collect();
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

    /// Forgives up to `amount` of what is owed for (`tag`, `key`): a
    /// refund of cost the fallback admitted, which the store then need not
    /// be charged. Returns the part of `amount` that was not owed.
    pub(crate) fn forgive(&self, tag: u64, key: KeyId, amount: u64) -> u64 {
        if self.is_empty() {
            return amount;
        }
        let mut owed = self.owed.lock();
        let left = match owed.get_mut(&(tag, key)) {
            Some(o) => {
                let forgiven = o.cost.min(amount);
                o.cost -= forgiven;
                if o.cost == 0 {
                    owed.remove(&(tag, key));
                }
                amount - forgiven
            }
            None => amount,
        };
        self.any.store(!owed.is_empty(), Ordering::Release);
        left
    }

    /// Puts back what could not be charged (the store failed again).
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

    /// Pairs owed now, cost settled since start, and pairs dropped.
    pub(crate) fn totals(&self) -> (usize, u64, u64) {
        (
            self.len(),
            self.settled.load(Ordering::Relaxed),
            self.dropped.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    use sluice_store::seam::{CounterDef, Slot};

    fn counter() -> Counter {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::TokenBucket,
            rate: Rate::per_second(1),
            burst: 10,
            nodelay: false,
        };
        Counter::new(CounterDef::new("a", spec).unwrap(), Slot::empty())
    }

    #[test]
    fn costs_add_up_per_pair_and_are_taken_once() {
        let c = counter();
        let tag = c.def().tag();
        let l = Ledger::new(10);
        assert!(l.is_empty());
        l.owe([(&c, KeyId(1), 2)]);
        l.owe([(&c, KeyId(1), 3), (&c, KeyId(2), 1)]);
        assert!(!l.is_empty());
        let taken = l.take_for([(tag, KeyId(1))]);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].cost, 5);
        assert!(l.take_for([(tag, KeyId(1))]).is_empty(), "taken once");
        assert_eq!(l.take_some(10).len(), 1);
        assert!(l.is_empty());
        l.put_back(taken);
        assert_eq!(l.len(), 1);
        assert!(!l.is_empty());
    }

    #[test]
    fn a_refund_forgives_what_is_owed_first() {
        let c = counter();
        let tag = c.def().tag();
        let l = Ledger::new(10);
        l.owe([(&c, KeyId(1), 3)]);
        assert_eq!(l.forgive(tag, KeyId(1), 2), 0, "all of it was owed");
        assert_eq!(l.forgive(tag, KeyId(1), 5), 4, "1 was still owed");
        assert!(l.is_empty(), "nothing is owed once forgiven");
        assert_eq!(l.forgive(tag, KeyId(2), 7), 7, "another pair owes nothing");
    }

    #[test]
    fn a_full_ledger_drops_new_pairs_and_counts_them() {
        let c = counter();
        let l = Ledger::new(2);
        for key in 0..5 {
            l.owe([(&c, KeyId(key), 1)]);
        }
        assert_eq!(l.len(), 2);
        assert_eq!(l.dropped.load(Ordering::Relaxed), 3);
        // A pair already owed still adds up.
        l.owe([(&c, KeyId(0), 4)]);
        let all = l.take_some(10);
        assert_eq!(all.iter().map(|o| o.cost).sum::<u64>(), 6);
    }
}
