//! The locks and atomics the store's tables use.
//!
//! Normally these are `parking_lot`'s locks and `std`'s atomics. Built with
//! `--cfg shuttle` (the model check in `tests/model_check.rs`), they are
//! `shuttle`'s instead, so that shuttle controls every interleaving of the
//! shard locks and of the atomic table's words (each key's TAT), and
//! reports a deadlock instead of hanging. Normal
//! builds never see shuttle. `Ordering` is `std`'s in both: shuttle's
//! atomics take it too.

use std::sync::atomic::Ordering;

#[cfg(not(shuttle))]
pub(crate) use self::striped::{RwLock, RwLockWriteGuard};
#[cfg(not(shuttle))]
pub(crate) use parking_lot::{Mutex, MutexGuard};
#[cfg(not(shuttle))]
pub(crate) use std::sync::atomic::AtomicU64;

#[cfg(shuttle)]
pub(crate) use self::model::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};
#[cfg(shuttle)]
pub(crate) use shuttle::sync::atomic::AtomicU64;

/// Waits a moment for a word that a pair's decision holds (a few
/// instructions), `backoff` being this waiter's: spin hints, then, should
/// the holder have lost its core, yields of this thread's time slice to it
/// (crossbeam's `Backoff::snooze`). Under shuttle always a yield, so that
/// the model check runs the holder.
#[inline]
pub(crate) fn spin(backoff: &crossbeam_utils::Backoff) {
    #[cfg(not(shuttle))]
    backoff.snooze();
    #[cfg(shuttle)]
    {
        let _ = backoff;
        shuttle::thread::yield_now();
    }
}

/// A word holding a TAT, as [`AtomicGcra`](crate::atomic_gcra::AtomicGcra)
/// decides on it: [`std::sync::atomic::AtomicU64`] (the only implementation
/// in a normal build, so that its generic callers compile to exactly the
/// calls on `std`'s atomic) and, under `cfg(shuttle)`, shuttle's too: the
/// memory store's atomic table then holds shuttle's while the other
/// lock-free limiters (`DirectLimiter`, `KeyedLimiter`) keep `std`'s.
pub(crate) trait AtomicWord {
    /// The atomic's own `load`.
    fn load(&self, order: Ordering) -> u64;

    /// The atomic's own `compare_exchange_weak`.
    fn compare_exchange_weak(
        &self,
        current: u64,
        new: u64,
        success: Ordering,
        failure: Ordering,
    ) -> Result<u64, u64>;
}

/// Forwards an atomic type's own methods.
macro_rules! atomic_word {
    ($t:ty) => {
        impl AtomicWord for $t {
            #[inline(always)]
            fn load(&self, order: Ordering) -> u64 {
                <$t>::load(self, order)
            }

            #[inline(always)]
            fn compare_exchange_weak(
                &self,
                current: u64,
                new: u64,
                success: Ordering,
                failure: Ordering,
            ) -> Result<u64, u64> {
                <$t>::compare_exchange_weak(self, current, new, success, failure)
            }
        }
    };
}

atomic_word!(std::sync::atomic::AtomicU64);
#[cfg(shuttle)]
atomic_word!(shuttle::sync::atomic::AtomicU64);

/// The lock of the tables' shards in a normal build, and of
/// `KeyedLimiter`'s shards in every build.
pub(crate) mod striped {
    use std::sync::PoisonError;

    use crossbeam_utils::sync::{ShardedLock, ShardedLockReadGuard, ShardedLockWriteGuard};

    /// The exclusive guard of a [`RwLock`].
    pub(crate) type RwLockWriteGuard<'a, T> = ShardedLockWriteGuard<'a, T>;

    /// A reader-writer lock whose readers each take one of several stripes
    /// (crossbeam's `ShardedLock`, chosen by thread): a read lock writes
    /// only to its own thread's stripe, so threads checking keys of the
    /// same shard do not pass the lock's cache line back and forth. A write
    /// lock (a new key, an eviction, a group's decision) takes every
    /// stripe.
    pub(crate) struct RwLock<T>(ShardedLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(ShardedLock::new(value))
        }

        /// Shares the lock. A panic while it was held (there is none in
        /// the store's critical sections) leaves the data consistent: take
        /// it.
        #[inline(always)]
        pub(crate) fn read(&self) -> ShardedLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        /// Takes the lock exclusively.
        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

#[cfg(shuttle)]
mod model {
    use std::sync::PoisonError;

    /// shuttle's guard, as `parking_lot`'s: it derefs to the data.
    pub(crate) type MutexGuard<'a, T> = shuttle::sync::MutexGuard<'a, T>;

    /// shuttle's exclusive guard, as `parking_lot`'s.
    pub(crate) type RwLockWriteGuard<'a, T> = shuttle::sync::RwLockWriteGuard<'a, T>;

    /// `shuttle::sync::RwLock` with `parking_lot`'s API: locking never
    /// fails (see [`Mutex::lock`]).
    #[derive(Debug)]
    pub(crate) struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(shuttle::sync::RwLock::new(value))
        }

        pub(crate) fn read(&self) -> shuttle::sync::RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(PoisonError::into_inner)
        }

        pub(crate) fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(PoisonError::into_inner)
        }
    }

    /// `shuttle::sync::Mutex` with `parking_lot`'s API: `lock` never fails.
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Self(shuttle::sync::Mutex::new(value))
        }

        /// Locks, taking the data even if a panicking thread poisoned the
        /// lock: `parking_lot`'s locks have no poisoning, and the model
        /// check reports that panic itself.
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(PoisonError::into_inner)
        }
    }
}
