//! A limit's table, whichever algorithm it runs: the store's handle on it.

use sluice_core::algorithms::bucket::BucketState;
use sluice_core::algorithms::concurrency::ConcurrencyState;
use sluice_core::algorithms::fixed_window::FixedWindowState;
use sluice_core::algorithms::gcra::GcraState;
use sluice_core::algorithms::sliding_log::SlidingLogState;
use sluice_core::algorithms::sliding_window::SlidingWindowState;
use sluice_core::{
    Algorithm, CheckError, Concurrency, Debited, Decision, FixedWindow, Gcra, LeakyBucket, Limiter,
    Nanos, Outcome, Rate, SlidingLog, SlidingWindow, TokenBucket, Update,
};

use crate::atomic_table::{AtomicTable, TatMap};
use crate::key::KeyId;
use crate::sync::{MutexGuard, RwLockWriteGuard};
use crate::table::{ShardMap, Table};

macro_rules! dispatch {
    ($table:expr, $t:ident => $body:expr) => {
        match $table {
            AnyTable::FixedWindow($t) => $body,
            AnyTable::SlidingLog($t) => $body,
            AnyTable::SlidingWindow($t) => $body,
            AnyTable::TokenBucket($t) => $body,
            AnyTable::LeakyBucket($t) => $body,
            AnyTable::Gcra($t) => $body,
            AnyTable::Concurrency($t) => $body,
            AnyTable::AtomicGcra($t) => $body,
        }
    };
}

/// One limit's state in a [`MemoryStore`](crate::MemoryStore), obtained with
/// [`MemoryStore::limit`](crate::MemoryStore::limit).
#[derive(Debug)]
pub struct Limit {
    pub(crate) id: String,
    /// Orders locks across limits.
    pub(crate) serial: u64,
    /// The algorithm it was registered with (its table may run an
    /// equivalent one: [`AnyTable::new`]).
    pub(crate) limiter: Limiter,
    pub(crate) table: AnyTable,
    /// A concurrency limit's leases (`None` for the other algorithms).
    pub(crate) leases: Option<crate::leases::Leases>,
}

impl Limit {
    /// The limit's identity (scope, name and definition).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The algorithm and parameters.
    pub fn limiter(&self) -> Limiter {
        self.limiter
    }

    /// Whether a check of one known key takes the fast design: one atomic
    /// word per key under a shared lock (GCRA, and the algorithms that
    /// decide as it does, with a whole-nanosecond emission interval).
    pub fn is_lock_free(&self) -> bool {
        matches!(self.table, AnyTable::AtomicGcra(_))
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        dispatch!(&self.table, t => t.len())
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys held at once.
    pub fn capacity(&self) -> usize {
        dispatch!(&self.table, t => t.capacity())
    }
}

/// The GCRA that decides as `limiter` does, if it is GCRA or one of the
/// algorithms equivalent to it.
fn as_gcra(limiter: &Limiter) -> Option<Gcra> {
    let (rate, burst) = match limiter {
        Limiter::Gcra(g) => return Some(*g),
        Limiter::TokenBucket(t) => (t.reduced_rate(), t.capacity()),
        Limiter::LeakyBucket(l) if l.nodelay() => (l.reduced_rate(), l.capacity()),
        _ => return None,
    };
    Gcra::new(Rate::new(rate.0, rate.1)?, burst).ok()
}

/// A table of any algorithm.
#[derive(Debug)]
pub(crate) enum AnyTable {
    FixedWindow(Table<FixedWindow>),
    SlidingLog(Table<SlidingLog>),
    SlidingWindow(Table<SlidingWindow>),
    TokenBucket(Table<TokenBucket>),
    LeakyBucket(Table<LeakyBucket>),
    Gcra(Table<Gcra>),
    Concurrency(Table<Concurrency>),
    /// GCRA with a whole-nanosecond interval: the fast design
    /// ([`AtomicTable`]).
    AtomicGcra(AtomicTable),
}

impl AnyTable {
    /// The table of `limiter`. GCRA, and the algorithms that decide
    /// exactly as it does (the token bucket, the leaky bucket with
    /// `nodelay`), take the fast design when their emission interval is a
    /// whole number of nanoseconds ([`AtomicTable`]).
    pub(crate) fn new(limiter: Limiter, shards: usize, max_keys: usize) -> Self {
        if let Some(t) = as_gcra(&limiter).and_then(|g| AtomicTable::new(g, shards, max_keys)) {
            return Self::AtomicGcra(t);
        }
        match limiter {
            Limiter::FixedWindow(a) => Self::FixedWindow(Table::new(a, shards, max_keys)),
            Limiter::SlidingLog(a) => Self::SlidingLog(Table::new(a, shards, max_keys)),
            Limiter::SlidingWindow(a) => Self::SlidingWindow(Table::new(a, shards, max_keys)),
            Limiter::TokenBucket(a) => Self::TokenBucket(Table::new(a, shards, max_keys)),
            Limiter::LeakyBucket(a) => Self::LeakyBucket(Table::new(a, shards, max_keys)),
            Limiter::Gcra(a) => Self::Gcra(Table::new(a, shards, max_keys)),
            Limiter::Concurrency(a) => Self::Concurrency(Table::new(a, shards, max_keys)),
        }
    }

    /// Checks one key and commits an admitted request. The atomic table,
    /// the usual one, is checked in line; the others out of line, so that
    /// the caller stays small.
    #[inline(always)]
    pub(crate) fn check(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        match self {
            AnyTable::AtomicGcra(t) => t.check(key, now, cost),
            other => other.check_locked(key, now, cost),
        }
    }

    /// [`check`](Self::check) on a table of per-key mutexes.
    #[inline(never)]
    fn check_locked(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        dispatch!(self, t => t.check(key, now, cost))
    }

    #[inline]
    pub(crate) fn shard_of(&self, key: KeyId) -> usize {
        dispatch!(self, t => t.shard_of(key))
    }

    pub(crate) fn purge(&self, now: Nanos) -> usize {
        dispatch!(self, t => t.purge(now))
    }

    /// Locks one shard for a multi-limit decision.
    pub(crate) fn lock(&self, shard: usize) -> Guard<'_> {
        match self {
            Self::FixedWindow(t) => Guard::FixedWindow(t, t.lock(shard)),
            Self::SlidingLog(t) => Guard::SlidingLog(t, t.lock(shard)),
            Self::SlidingWindow(t) => Guard::SlidingWindow(t, t.lock(shard)),
            Self::TokenBucket(t) => Guard::TokenBucket(t, t.lock(shard)),
            Self::LeakyBucket(t) => Guard::LeakyBucket(t, t.lock(shard)),
            Self::Gcra(t) => Guard::Gcra(t, t.lock(shard)),
            Self::Concurrency(t) => Guard::Concurrency(t, t.lock(shard)),
            Self::AtomicGcra(t) => Guard::AtomicGcra(t, t.lock(shard)),
        }
    }
}

/// A locked shard of a table of any algorithm.
pub(crate) enum Guard<'a> {
    FixedWindow(
        &'a Table<FixedWindow>,
        MutexGuard<'a, ShardMap<FixedWindowState>>,
    ),
    SlidingLog(
        &'a Table<SlidingLog>,
        MutexGuard<'a, ShardMap<SlidingLogState>>,
    ),
    SlidingWindow(
        &'a Table<SlidingWindow>,
        MutexGuard<'a, ShardMap<SlidingWindowState>>,
    ),
    TokenBucket(
        &'a Table<TokenBucket>,
        MutexGuard<'a, ShardMap<BucketState>>,
    ),
    LeakyBucket(
        &'a Table<LeakyBucket>,
        MutexGuard<'a, ShardMap<BucketState>>,
    ),
    Gcra(&'a Table<Gcra>, MutexGuard<'a, ShardMap<GcraState>>),
    Concurrency(
        &'a Table<Concurrency>,
        MutexGuard<'a, ShardMap<ConcurrencyState>>,
    ),
    AtomicGcra(&'a AtomicTable, RwLockWriteGuard<'a, TatMap>),
}

macro_rules! each_guard {
    ($guard:expr, $t:ident, $g:ident, $u:ident => $body:expr) => {
        match $guard {
            Guard::FixedWindow($t, $g) => {
                #[allow(unused_imports)]
                use Update::FixedWindow as $u;
                $body
            }
            Guard::SlidingLog($t, $g) => {
                #[allow(unused_imports)]
                use Update::SlidingLog as $u;
                $body
            }
            Guard::SlidingWindow($t, $g) => {
                #[allow(unused_imports)]
                use Update::SlidingWindow as $u;
                $body
            }
            Guard::TokenBucket($t, $g) => {
                #[allow(unused_imports)]
                use Update::Bucket as $u;
                $body
            }
            Guard::LeakyBucket($t, $g) => {
                #[allow(unused_imports)]
                use Update::Bucket as $u;
                $body
            }
            Guard::Gcra($t, $g) => {
                #[allow(unused_imports)]
                use Update::Gcra as $u;
                $body
            }
            Guard::Concurrency($t, $g) => {
                #[allow(unused_imports)]
                use Update::Concurrency as $u;
                $body
            }
            Guard::AtomicGcra($t, $g) => {
                #[allow(unused_imports)]
                use Update::Gcra as $u;
                $body
            }
        }
    };
}

impl Guard<'_> {
    pub(crate) fn peek(
        &self,
        key: KeyId,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<Update>, CheckError> {
        each_guard!(self, t, g, U => {
            let o = g.peek(t.algorithm(), key, now, cost)?;
            Ok(Outcome { decision: o.decision, update: o.update.map(U) })
        })
    }

    /// Gives back `amount` of a key's charged cost at `now`.
    pub(crate) fn refund(&mut self, key: KeyId, now: Nanos, amount: u64) {
        each_guard!(self, t, g, _U => g.refund(t.algorithm(), key, now, amount))
    }

    /// Charges `amount` to a key at `now`, into debt up to `max_debt`; a
    /// key taken in counts towards the table's cap.
    pub(crate) fn debit(&mut self, key: KeyId, now: Nanos, amount: u64, max_debt: u64) -> Debited {
        each_guard!(self, t, g, _U => {
            g.debit(t.algorithm(), key, (now, t.per_shard_cap()), amount, max_debt)
        })
    }

    pub(crate) fn commit(&mut self, key: KeyId, update: Update, now: Nanos) {
        each_guard!(self, t, g, U => {
            if let U(u) = update {
                g.commit(t.algorithm(), key, u, now, t.per_shard_cap());
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};

    fn gcra(rate: Rate) -> Limiter {
        LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate,
            burst: 5,
            nodelay: false,
        }
        .build()
        .unwrap()
    }

    #[test]
    fn gcra_of_a_whole_nanosecond_interval_gets_the_atomic_table() {
        for rate in [
            Rate::per_second(10),
            Rate::per_second(1000),
            Rate::per_minute(3),
        ] {
            assert!(
                matches!(AnyTable::new(gcra(rate), 8, 100), AnyTable::AtomicGcra(_)),
                "{rate:?}"
            );
        }
        // 1/7 s is no whole number of nanoseconds: the mutex table.
        assert!(matches!(
            AnyTable::new(gcra(Rate::per_second(7)), 8, 100),
            AnyTable::Gcra(_)
        ));
    }
}
