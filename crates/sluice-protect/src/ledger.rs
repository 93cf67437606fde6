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
//! **Debits** ([`Store::debit`](sluice_store::seam::Store::debit)) made
//! while the store could not take them are owed too, apart from the
//! admissions of the same pair: they are charged as debits, whatever the
//! limit has left, into debt up to their `max_debt` (the largest of the
//! debits owed for the pair), after the pair's admissions. A refund of the
//! key forgives what is owed for debits first (the newest cost), then the
//! admissions.
//!
//! The ledger is bounded: at most `max` (limit, key) entries. When it is
//! full, admissions for new pairs are not recorded and are counted as
//! dropped (`dropped`); a pair already owed keeps adding up.
//!
//! An entry taken to be charged is *out* until its charge ends: a refund of
//! the key meanwhile is forgiven from it (up to its cost), and the charge
//! then gives the store back what it took beyond what is still owed, or,
//! if it failed, what is put back is owed less what was forgiven. Taken
//! entries are held in `Taken`, which puts back whatever was not charged
//! however the charging ends (a timeout, or a dropped request).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
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
    /// The cost admitted by the fallback (or debited) and not yet charged.
    pub(crate) cost: u64,
    /// `Some(max_debt)` for cost debited during an outage, charged as a
    /// debit into debt up to `max_debt`; `None` for admissions.
    pub(crate) max_debt: Option<u64>,
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
    state: Mutex<State>,
    /// Whether anything is owed: the one load a decision pays while nothing
    /// is.
    any: AtomicBool,
    /// Whether anything is owed or out being charged: one flag, so that a
    /// refund never misses an entry moving between the two.
    any_at_all: AtomicBool,
    max: usize,
    /// Admissions not recorded because the ledger was full.
    pub(crate) dropped: AtomicU64,
    /// Cost charged to the remote store after an outage.
    pub(crate) settled: AtomicU64,
}

/// The ledger's entries: owed, and out being charged.
#[derive(Debug, Default)]
struct State {
    owed: HashMap<Pair, Owed>,
    out: HashMap<Pair, Out>,
}

/// What an entry is owed for: (limit tag, key, whether it is debited).
type Pair = (u64, KeyId, bool);

/// An entry out being charged: its cost, and how much of it refunds have
/// forgiven since it was taken.
#[derive(Debug, Clone, Copy)]
struct Out {
    cost: u64,
    forgiven: u64,
}

/// The (limit tag, key) pair an entry is owed for, and its kind.
fn pair(o: &Owed) -> Pair {
    (o.counter.def().tag(), o.key, o.max_debt.is_some())
}

impl Ledger {
    /// An empty ledger of at most `max` (limit, key) entries.
    pub(crate) fn new(max: usize) -> Self {
        Self {
            state: Mutex::new(State::default()),
            any: AtomicBool::new(false),
            any_at_all: AtomicBool::new(false),
            max: max.max(1),
            dropped: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        }
    }

    /// Whether anything is owed (entries out being charged aside).
    pub(crate) fn is_empty(&self) -> bool {
        !self.any.load(Ordering::Acquire)
    }

    /// Records what the fallback admitted: `(remote counter, key, cost)`
    /// for each check of a request.
    pub(crate) fn owe<'a>(&self, admitted: impl IntoIterator<Item = (&'a Counter, KeyId, u64)>) {
        let mut state = self.state.lock();
        for (counter, key, cost) in admitted.into_iter().filter(|(_, _, cost)| *cost > 0) {
            self.add(&mut state.owed, cost, None, || Owed {
                counter: counter.clone(),
                key,
                cost: 0,
                max_debt: None,
            });
        }
        self.publish(&state);
    }

    /// Records a debit the store could not take: `amount` charged to `key`
    /// of `counter` (the remote store's), into debt up to `max_debt`.
    /// Returns false when it could not be recorded (a new pair, the ledger
    /// full), and counts it dropped.
    pub(crate) fn owe_debit(
        &self,
        counter: &Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> bool {
        if amount == 0 {
            return true;
        }
        let mut state = self.state.lock();
        let recorded = self.add(&mut state.owed, amount, Some(max_debt), || Owed {
            counter: counter.clone(),
            key,
            cost: 0,
            max_debt: Some(max_debt),
        });
        self.publish(&state);
        recorded
    }

    /// Sets the flags from the entries.
    fn publish(&self, state: &State) {
        self.any.store(!state.owed.is_empty(), Ordering::Release);
        let at_all = !state.owed.is_empty() || !state.out.is_empty();
        self.any_at_all.store(at_all, Ordering::Release);
    }

    /// Adds `cost` (with a debit's `max_debt`: the largest is kept) to a
    /// pair's entry (made by `entry` if new), or counts it dropped when a
    /// new pair finds the ledger full. Returns whether it was added.
    fn add(
        &self,
        owed: &mut HashMap<Pair, Owed>,
        cost: u64,
        max_debt: Option<u64>,
        entry: impl FnOnce() -> Owed,
    ) -> bool {
        let new = entry();
        let full = owed.len() >= self.max;
        match owed.entry(pair(&new)) {
            Entry::Occupied(mut e) => {
                let o = e.get_mut();
                o.cost = o.cost.saturating_add(cost);
                o.max_debt = o.max_debt.max(max_debt);
                true
            }
            Entry::Vacant(_) if full => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
                false
            }
            Entry::Vacant(e) => {
                e.insert(Owed { cost, ..new });
                true
            }
        }
    }

    /// Takes what is owed for these (limit tag, key) pairs, out to be
    /// charged (a pair's admissions before its debits); a pair out already
    /// stays owed until that charge ends.
    pub(crate) fn take_for(&self, pairs: impl IntoIterator<Item = (u64, KeyId)>) -> Taken<'_> {
        let mut state = self.state.lock();
        let mut taken = VecDeque::new();
        for (tag, key) in pairs {
            for p in [(tag, key, false), (tag, key, true)] {
                if !state.out.contains_key(&p)
                    && let Some(o) = state.owed.remove(&p)
                {
                    taken.push_back(o);
                }
            }
        }
        self.take_out(state, taken)
    }

    /// Takes up to `n` owed entries, any of them (see [`take_for`](Self::take_for)).
    pub(crate) fn take_some(&self, n: usize) -> Taken<'_> {
        let mut state = self.state.lock();
        let State { owed, out } = &mut *state;
        let keys: Vec<Pair> = owed
            .keys()
            .filter(|k| !out.contains_key(k))
            .take(n)
            .copied()
            .collect();
        let taken = keys.iter().filter_map(|k| owed.remove(k)).collect();
        self.take_out(state, taken)
    }

    /// Marks `taken` out, and hands it over.
    fn take_out(
        &self,
        mut state: parking_lot::MutexGuard<'_, State>,
        taken: VecDeque<Owed>,
    ) -> Taken<'_> {
        for o in &taken {
            let out = Out {
                cost: o.cost,
                forgiven: 0,
            };
            state.out.insert(pair(o), out);
        }
        self.publish(&state);
        Taken {
            ledger: self,
            owed: taken,
        }
    }

    /// Forgives up to `amount` of what is owed for (`tag`, `key`): a
    /// refund of cost the fallback admitted, which the store then need not
    /// be charged. Returns the part of `amount` that was not owed.
    pub(crate) fn forgive(&self, tag: u64, key: KeyId, amount: u64) -> u64 {
        if !self.any_at_all.load(Ordering::Acquire) {
            return amount;
        }
        let mut state = self.state.lock();
        let mut left = amount;
        // Debits first: the newest cost.
        for p in [(tag, key, true), (tag, key, false)] {
            if let Some(o) = state.owed.get_mut(&p) {
                let forgiven = o.cost.min(left);
                o.cost -= forgiven;
                left -= forgiven;
                if o.cost == 0 {
                    state.owed.remove(&p);
                }
            }
            if let Some(o) = state.out.get_mut(&p) {
                let forgiven = (o.cost - o.forgiven).min(left);
                o.forgiven += forgiven;
                left -= forgiven;
            }
        }
        self.publish(&state);
        left
    }

    /// Ends the charge of an entry out: returns how much of its cost
    /// refunds forgave meanwhile.
    pub(crate) fn charged(&self, o: &Owed) -> u64 {
        let mut state = self.state.lock();
        let forgiven = state.out.remove(&pair(o)).map_or(0, |out| out.forgiven);
        self.publish(&state);
        forgiven
    }

    /// Puts back what could not be charged (the store failed again), less
    /// what refunds forgave while it was out.
    fn put_back(&self, entries: impl IntoIterator<Item = Owed>) {
        let mut state = self.state.lock();
        for mut o in entries {
            let forgiven = state.out.remove(&pair(&o)).map_or(0, |out| out.forgiven);
            o.cost = o.cost.saturating_sub(forgiven);
            if o.cost > 0 {
                let (cost, max_debt) = (o.cost, o.max_debt);
                self.add(&mut state.owed, cost, max_debt, || o);
            }
        }
        self.publish(&state);
    }

    /// How many (limit, key) pairs are owed.
    pub(crate) fn len(&self) -> usize {
        self.state.lock().owed.len()
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

/// Entries taken out of the ledger to be charged: those still here when
/// it is dropped were not charged, and are owed again (see the module
/// docs).
#[derive(Debug)]
pub(crate) struct Taken<'l> {
    ledger: &'l Ledger,
    /// The entries not charged yet, in the order they are charged.
    pub(crate) owed: VecDeque<Owed>,
}

impl Taken<'_> {
    /// Whether nothing was taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.owed.is_empty()
    }

    /// The ledger the entries were taken from.
    pub(crate) fn ledger(&self) -> &Ledger {
        self.ledger
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.owed.is_empty() {
            self.ledger.put_back(self.owed.drain(..));
        }
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
        assert_eq!(taken.owed.len(), 1);
        assert_eq!(taken.owed[0].cost, 5);
        assert!(l.take_for([(tag, KeyId(1))]).is_empty(), "taken once");
        let rest = l.take_some(10);
        assert_eq!(rest.owed.len(), 1);
        assert!(l.is_empty());
        // Not charged: owed again.
        drop(taken);
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
    fn debits_are_owed_apart_taken_after_admissions_and_forgiven_first() {
        let c = counter();
        let tag = c.def().tag();
        let l = Ledger::new(10);
        l.owe([(&c, KeyId(1), 2)]);
        assert!(l.owe_debit(&c, KeyId(1), 4, 1));
        assert!(l.owe_debit(&c, KeyId(1), 3, 6));
        assert_eq!(l.len(), 2, "an admission and a debit of one key");
        assert_eq!(l.forgive(tag, KeyId(1), 1), 0, "from the debit");
        let taken = l.take_for([(tag, KeyId(1))]);
        let got: Vec<(u64, Option<u64>)> =
            taken.owed.iter().map(|o| (o.cost, o.max_debt)).collect();
        assert_eq!(got, [(2, None), (6, Some(6))], "the larger max_debt kept");
        let full = Ledger::new(1);
        full.owe([(&c, KeyId(1), 1)]);
        assert!(
            !full.owe_debit(&c, KeyId(2), 1, 0),
            "no room: counted dropped"
        );
        assert_eq!(full.dropped.load(Ordering::Relaxed), 1);
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
        assert_eq!(all.owed.iter().map(|o| o.cost).sum::<u64>(), 6);
    }
}
