//! A concurrency limit's leases in the memory store (see
//! [`LeaseId`](crate::seam::LeaseId)): which of a key's slots are held
//! under which lease, and until when.
//!
//! The slots themselves are counted in the limit's table, as every slot
//! is; this only remembers which of them end by themselves. A lease that
//! ends is taken out here and its slots given back to the table by the
//! store ([`MemoryStore`](crate::MemoryStore)), before any check of its
//! key, and by [`purge_expired`](crate::MemoryStore::purge_expired) for
//! keys no check names again.
//!
//! Bounded by what it counts: at most one entry per held slot, so per key
//! at most the limit's `max_in_flight` plus its debt, and at most the
//! table's `max_keys` keys.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use sluice_core::Nanos;
use smallvec::SmallVec;

use crate::key::KeyId;
use crate::seam::LeaseId;

/// One lease on a key.
#[derive(Debug, Clone, Copy)]
struct Leased {
    id: LeaseId,
    held: u64,
    ends: Nanos,
}

/// A concurrency limit's leases, by key.
#[derive(Debug)]
pub(crate) struct Leases {
    /// How long a lease lasts, in nanoseconds.
    lease: Nanos,
    /// Leases held (0: nothing to look up, the usual case).
    count: AtomicUsize,
    by_key: Mutex<HashMap<KeyId, SmallVec<[Leased; 2]>>>,
}

impl Leases {
    /// No leases, each to last `lease` nanoseconds.
    pub(crate) fn new(lease: Nanos) -> Self {
        Self {
            lease,
            count: AtomicUsize::new(0),
            by_key: Mutex::default(),
        }
    }

    /// Whether no lease is held.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.count.load(Ordering::Acquire) == 0
    }

    /// Takes out `key`'s leases that ended by `now`: the slots they held,
    /// for the store to give back.
    pub(crate) fn ended(&self, key: KeyId, now: Nanos) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut map = self.by_key.lock();
        let Some(leases) = map.get_mut(&key) else {
            return 0;
        };
        let before = leases.len();
        let mut back = 0;
        leases.retain(|l| {
            let live = l.ends > now;
            if !live {
                back += l.held;
            }
            live
        });
        let gone = before - leases.len();
        if leases.is_empty() {
            map.remove(&key);
        }
        self.count.fetch_sub(gone, Ordering::Release);
        back
    }

    /// Takes out every lease that ended by `now`: per key, the slots they
    /// held.
    pub(crate) fn all_ended(&self, now: Nanos) -> Vec<(KeyId, u64)> {
        if self.is_empty() {
            return Vec::new();
        }
        let keys: Vec<KeyId> = self
            .by_key
            .lock()
            .iter()
            .filter(|(_, ls)| ls.iter().any(|l| l.ends <= now))
            .map(|(k, _)| *k)
            .collect();
        keys.into_iter()
            .map(|k| (k, self.ended(k, now)))
            .filter(|(_, back)| *back > 0)
            .collect()
    }

    /// `cost` slots admitted at `now` under lease `id`: they join it, and
    /// it ends one lease from now (never earlier than it did).
    pub(crate) fn take(&self, key: KeyId, id: LeaseId, cost: u64, now: Nanos) {
        let ends = now.saturating_add(self.lease);
        let mut map = self.by_key.lock();
        let leases = map.entry(key).or_default();
        match leases.iter_mut().find(|l| l.id == id) {
            Some(l) => {
                l.held = l.held.saturating_add(cost);
                l.ends = l.ends.max(ends);
            }
            None => {
                leases.push(Leased {
                    id,
                    held: cost,
                    ends,
                });
                self.count.fetch_add(1, Ordering::Release);
            }
        }
    }

    /// Lease `id`, if still held, ends one lease from `now`.
    pub(crate) fn renew(&self, key: KeyId, id: LeaseId, now: Nanos) {
        if self.is_empty() {
            return;
        }
        let ends = now.saturating_add(self.lease);
        if let Some(l) = self
            .by_key
            .lock()
            .get_mut(&key)
            .and_then(|ls| ls.iter_mut().find(|l| l.id == id))
        {
            l.ends = l.ends.max(ends);
        }
    }

    /// Releases up to `amount` slots of lease `id`: what it held of them,
    /// for the store to give back (0 for a lease not held: ended, released
    /// or never taken).
    pub(crate) fn release(&self, key: KeyId, id: LeaseId, amount: u64) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut map = self.by_key.lock();
        let Some(leases) = map.get_mut(&key) else {
            return 0;
        };
        let Some(i) = leases.iter().position(|l| l.id == id) else {
            return 0;
        };
        let freed = amount.min(leases[i].held);
        leases[i].held -= freed;
        if leases[i].held == 0 {
            leases.swap_remove(i);
            self.count.fetch_sub(1, Ordering::Release);
            if leases.is_empty() {
                map.remove(&key);
            }
        }
        freed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u64) -> LeaseId {
        LeaseId::from_u64((1 << 52) + n).unwrap()
    }

    #[test]
    fn a_lease_frees_its_own_slots_once_and_ends_by_itself() {
        let leases = Leases::new(100);
        let k = KeyId(1);
        leases.take(k, id(1), 2, 0);
        leases.take(k, id(2), 1, 50);
        assert_eq!(leases.release(k, id(3), 1), 0, "never taken");
        assert_eq!(leases.release(k, id(1), 5), 2, "no more than it holds");
        assert_eq!(leases.release(k, id(1), 1), 0, "released already");
        assert_eq!(leases.ended(k, 149), 0);
        leases.renew(k, id(2), 100);
        assert_eq!(leases.ended(k, 150), 0, "renewed");
        assert_eq!(leases.all_ended(200), vec![(k, 1)]);
        assert!(leases.is_empty());
        assert_eq!(leases.release(k, id(2), 1), 0, "ended");
    }
}
