//! The atomic table's map of one shard: key ids to TATs, in one array of
//! slots probed linearly, each slot the key and its word side by side.
//!
//! A check of a known key reads the slot's line, which holds both the key
//! it compares and the word its compare-and-swap moves; a map of separate
//! tags and entries (hashbrown's) reads a tag group, then the entry. Each
//! slot is 16 bytes, four to a line, with no tag byte beside it: fewer
//! bytes per key, and a faster check on a large table (both measured in
//! `docs/benchmarks.md`).
//!
//! The keys are the low halves of [`KeyId`](crate::KeyId)s: a keyed hash,
//! uniformly random and unknown to clients, so the slot is the key's low
//! bits, and no client can pick keys that crowd one run of slots. Key 0
//! marks an empty slot, so the id whose low half is 0 is stored as
//! [`ZERO`] (the two share a slot, as any two ids with the same low half
//! do: about one chance in 2⁶⁴ per pair).
//!
//! Only the words are atomic: the keys change under the shard's exclusive
//! lock alone (an insert, a purge, an eviction), which holds `&mut self`.
//! At most seven eighths of the slots are used, so a probe always ends: at
//! the key, or at an empty slot. A known key is found in under three
//! probes on average (linear probing at that load); a new key's longer
//! search happens under the exclusive lock, before it is inserted.

use crate::sync::AtomicU64;

/// The slot key that marks an empty slot.
const EMPTY: u64 = 0;

/// The stored key of an id whose low half is [`EMPTY`].
const ZERO: u64 = 0x9e37_79b9_7f4a_7c15;

/// The fewest slots of a map that holds anything.
const MIN_SLOTS: usize = 8;

/// One key and its TAT, on 16 bytes: four to a cache line, none split
/// between two.
#[repr(C, align(16))]
struct Slot {
    key: u64,
    tat: AtomicU64,
}

impl Slot {
    fn empty() -> Self {
        Self {
            key: EMPTY,
            tat: AtomicU64::new(0),
        }
    }
}

/// A map from key (the low half of an id) to its TAT word. See the module
/// docs.
pub(crate) struct ProbeMap {
    slots: Box<[Slot]>,
    len: usize,
}

impl Default for ProbeMap {
    fn default() -> Self {
        Self {
            slots: Box::new([]),
            len: 0,
        }
    }
}

/// The key as a slot holds it.
#[inline(always)]
fn stored(key: u64) -> u64 {
    if key == EMPTY { ZERO } else { key }
}

impl crate::table::Evict for ProbeMap {
    type Value = AtomicU64;
    fn held(&self) -> usize {
        self.len
    }
    fn keep(&mut self, keep: impl FnMut(&mut AtomicU64) -> bool) {
        self.retain(keep);
    }
}

impl ProbeMap {
    /// The word of `key`, if held.
    #[inline(always)]
    pub(crate) fn get(&self, key: &u64) -> Option<&AtomicU64> {
        let key = stored(*key);
        let mask = self.slots.len().wrapping_sub(1);
        let mut i = key as usize & mask;
        loop {
            let slot = self.slots.get(i)?;
            if slot.key == key {
                return Some(&slot.tat);
            }
            if slot.key == EMPTY {
                return None;
            }
            i = (i + 1) & mask;
        }
    }

    /// The number of keys held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Stores `key`'s word, replacing any it had.
    pub(crate) fn insert(&mut self, key: u64, tat: AtomicU64) {
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        self.place(Slot {
            key: stored(key),
            tat,
        });
    }

    /// Keeps only the keys whose word `keep` accepts.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&mut AtomicU64) -> bool) {
        let mut removed = 0;
        for slot in &mut self.slots {
            if slot.key != EMPTY && !keep(&mut slot.tat) {
                slot.key = EMPTY;
                removed += 1;
            }
        }
        if removed > 0 {
            // A probe stops at an empty slot: place the rest again.
            self.len -= removed;
            self.rebuild(self.slots.len());
        }
    }

    /// Doubles the slots (or makes the first ones).
    #[cold]
    fn grow(&mut self) {
        self.rebuild((self.slots.len() * 2).max(MIN_SLOTS));
    }

    /// Moves the keys held into `n` new slots.
    fn rebuild(&mut self, n: usize) {
        let old = std::mem::replace(&mut self.slots, (0..n).map(|_| Slot::empty()).collect());
        self.len = 0;
        for slot in old.into_vec() {
            if slot.key != EMPTY {
                self.place(slot);
            }
        }
    }

    /// Puts a slot at its key's place, or over its key's old slot. There
    /// is room (at most seven eighths of the slots are used).
    fn place(&mut self, slot: Slot) {
        let mask = self.slots.len() - 1;
        let mut i = slot.key as usize & mask;
        loop {
            let here = &mut self.slots[i];
            if here.key == slot.key {
                *here = slot;
                return;
            }
            if here.key == EMPTY {
                *here = slot;
                self.len += 1;
                return;
            }
            i = (i + 1) & mask;
        }
    }
}

#[cfg(all(test, not(shuttle)))]
mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::Ordering;

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u64, u64),
        Get(u64),
        /// Keep the words above this value.
        Retain(u64),
    }

    /// Keys from a small set (0 and the stored form of 0 among them), so
    /// that ops meet the same keys and their neighbours' slots.
    fn key() -> impl Strategy<Value = u64> {
        prop_oneof![Just(0), Just(ZERO ^ 1), 1u64..40, any::<u64>()]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (key(), any::<u64>()).prop_map(|(k, v)| Op::Insert(k, v)),
            4 => key().prop_map(Op::Get),
            1 => any::<u64>().prop_map(Op::Retain),
        ]
    }

    proptest! {
        /// The map holds what a `HashMap` of the same ops holds.
        #[test]
        fn matches_a_hash_map(ops in proptest::collection::vec(op(), 0..300)) {
            let mut map = ProbeMap::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => {
                        map.insert(k, AtomicU64::new(v));
                        model.insert(k, v);
                    }
                    Op::Get(k) => {
                        let got = map.get(&k).map(|w| w.load(Ordering::Relaxed));
                        prop_assert_eq!(got, model.get(&k).copied());
                    }
                    Op::Retain(t) => {
                        map.retain(|w| *w.get_mut() > t);
                        model.retain(|_, v| *v > t);
                    }
                }
                prop_assert_eq!(map.len(), model.len());
                prop_assert!(map.len() * 8 <= map.slots.len() * 7);
            }
            let mut held: Vec<u64> = Vec::new();
            map.retain(|w| {
                held.push(*w.get_mut());
                true
            });
            let mut want: Vec<u64> = model.values().copied().collect();
            held.sort_unstable();
            want.sort_unstable();
            prop_assert_eq!(held, want);
        }
    }

    #[test]
    fn an_empty_map_holds_nothing() {
        let map = ProbeMap::default();
        assert!(map.get(&0).is_none());
        assert!(map.get(&7).is_none());
        assert_eq!(map.len(), 0);
    }

    #[test]
    fn a_slot_is_a_quarter_line() {
        assert_eq!(std::mem::size_of::<Slot>(), 16);
        assert_eq!(std::mem::align_of::<Slot>(), 16);
    }
}
