//! Leases: concurrency slots held for a request whose end Sluice may not
//! see.
//!
//! A concurrency slot taken by the proxy or the tower layer is given back
//! when the response ends, which the same process sees: it is held by the
//! instance (on Redis, under a lease of the instance's own, renewed by its
//! checks, so that an instance that dies gives its slots back one lease
//! later). A slot taken through Envoy is given back by a later call that
//! may never come (Envoy crashed, or its stream-done call failed): it is
//! held under a [`LeaseId`] of its own, named by the request that took it.
//!
//! On every store, a [`Check`](super::Check) with a lease on a concurrency
//! limit:
//! - **takes**: an admitted cost joins the lease, which ends one lease time
//!   (the limit's window) after it was taken;
//! - **renews** with cost 0: a lease still held ends one lease time from
//!   now;
//! - **releases** in a refund: the slots come off that lease only, never
//!   more than it holds. A lease that ended, was released already or was
//!   never taken frees nothing, so a release that comes twice, or late,
//!   never frees another request's slot.
//!
//! A lease that ends gives its slots back by itself. Other algorithms
//! ignore leases.

use std::num::NonZeroU64;

/// The id of a lease: random, in `[2^52, 2^53)` (exact in a double, as the
/// Redis script keeps it, and apart from the instance ids below 2^52).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(NonZeroU64);

/// Lease ids are at least this.
const FIRST: u64 = 1 << 52;

impl LeaseId {
    /// A fresh lease id, from a keyed hash of a per-process random key and
    /// a counter: unpredictable without the key, and distinct per call.
    pub fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            static KEYS: RandomState = RandomState::new();
        }
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let h = KEYS.with(|k| k.hash_one((n, std::process::id())));
        Self::from_u64(FIRST | (h % FIRST)).unwrap_or(Self(NonZeroU64::MIN.saturating_add(FIRST)))
    }

    /// The lease `id`, if it is one (in `[2^52, 2^53)`).
    pub fn from_u64(id: u64) -> Option<Self> {
        (FIRST..2 * FIRST)
            .contains(&id)
            .then(|| NonZeroU64::new(id).map(Self))
            .flatten()
    }

    /// The id, as a number.
    pub fn get(self) -> u64 {
        self.0.get()
    }

    /// The lease written as text (decimal), as adapters pass it on.
    pub fn parse(text: &str) -> Option<Self> {
        text.trim().parse().ok().and_then(Self::from_u64)
    }
}

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_in_their_range_distinct_and_read_back() {
        let ids: std::collections::HashSet<LeaseId> =
            (0..1000).map(|_| LeaseId::random()).collect();
        assert_eq!(ids.len(), 1000);
        for id in ids {
            assert!((FIRST..2 * FIRST).contains(&id.get()));
            assert_eq!(LeaseId::parse(&id.to_string()), Some(id));
        }
        assert_eq!(LeaseId::parse("1"), None, "an instance id or a count");
        assert_eq!(LeaseId::parse(&(2 * FIRST).to_string()), None);
        assert_eq!(LeaseId::parse("-5"), None);
    }
}
