//! Runtime state in this process only: plans live in the engine's own copy,
//! credits here.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

use crate::key::KeyId;
use crate::seam::{Pending, RuntimeStore, RuntimeStoreError};

/// Runtime state for one process (the memory store's companion): a plan
/// assignment needs nothing beyond the engine's copy, and burst credits
/// are a map behind one lock. Every answer is ready at once.
///
/// ```
/// use std::time::Duration;
/// use sluice_store::seam::{RuntimeStore, now_or_never};
/// use sluice_store::{KeyId, MemoryRuntime};
/// let state = MemoryRuntime::default();
/// let key = KeyId(7);
/// now_or_never(state.set_credits(key, 5)).unwrap().unwrap();
/// let left = now_or_never(state.spend_credits(key, 3, Duration::ZERO)).unwrap().unwrap();
/// assert_eq!(left, Some(2));
/// let short = now_or_never(state.spend_credits(key, 3, Duration::ZERO)).unwrap().unwrap();
/// assert_eq!(short, None);
/// ```
#[derive(Debug, Default)]
pub struct MemoryRuntime {
    credits: Mutex<HashMap<KeyId, u64>>,
}

impl MemoryRuntime {
    fn set(&self, key: KeyId, credits: u64) {
        let mut all = self.credits.lock();
        if credits == 0 {
            all.remove(&key);
        } else {
            all.insert(key, credits);
        }
    }
}

impl RuntimeStore for MemoryRuntime {
    fn answers_at_once(&self) -> bool {
        true
    }

    fn set_plan<'a>(
        &'a self,
        _key: KeyId,
        _plan: &'a str,
    ) -> Pending<'a, Result<(), RuntimeStoreError>> {
        Pending::ready(Ok(()))
    }

    fn remove_plan(&self, _key: KeyId) -> Pending<'_, Result<bool, RuntimeStoreError>> {
        Pending::ready(Ok(false))
    }

    fn set_credits(&self, key: KeyId, credits: u64) -> Pending<'_, Result<(), RuntimeStoreError>> {
        self.set(key, credits);
        Pending::ready(Ok(()))
    }

    fn credits(&self, key: KeyId) -> Pending<'_, Result<u64, RuntimeStoreError>> {
        Pending::ready(Ok(self.credits.lock().get(&key).copied().unwrap_or(0)))
    }

    fn spend_credits(
        &self,
        key: KeyId,
        need: u64,
        _within: Duration,
    ) -> Pending<'_, Result<Option<u64>, RuntimeStoreError>> {
        let mut all = self.credits.lock();
        let balance = all.get(&key).copied().unwrap_or(0);
        if balance < need {
            return Pending::ready(Ok(None));
        }
        let left = balance - need;
        if left == 0 {
            all.remove(&key);
        } else {
            all.insert(key, left);
        }
        Pending::ready(Ok(Some(left)))
    }

    fn refund_credits(
        &self,
        key: KeyId,
        amount: u64,
    ) -> Pending<'_, Result<(), RuntimeStoreError>> {
        // Nothing to give back adds no entry: 0 credits is no entry.
        if amount > 0 {
            let mut all = self.credits.lock();
            let balance = all.get(&key).copied().unwrap_or(0);
            all.insert(key, balance.saturating_add(amount));
        }
        Pending::ready(Ok(()))
    }
}
