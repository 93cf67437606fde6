//! The locks the store's tables use.
//!
//! Normally these are `parking_lot`'s. Built with `--cfg shuttle` (the model
//! check in `tests/model_check.rs`), they are `shuttle`'s instead, so that
//! shuttle controls every interleaving of the shard locks and reports a
//! deadlock instead of hanging. Normal builds never see shuttle.

#[cfg(not(shuttle))]
pub(crate) use parking_lot::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};

#[cfg(shuttle)]
pub(crate) use self::model::{Mutex, MutexGuard, RwLock, RwLockWriteGuard};

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
