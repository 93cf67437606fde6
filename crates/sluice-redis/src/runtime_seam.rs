//! [`RuntimeState`] behind the runtime-state seam: what the engine calls,
//! with this instance's copy of the credit balances spared a round trip
//! where it can be, and the watcher that keeps the engine's plans current.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use sluice_store::KeyId;
use sluice_store::seam::{Pending, PlansSink, RuntimeStore, RuntimeStoreError};

use crate::RedisStoreError;
use crate::runtime_state::{RuntimeSink, RuntimeState, spawn_watch_with};

/// What the engine's watcher hands loaded state to: plans to the engine,
/// credits to this instance's copy.
struct Forward {
    plans: Arc<dyn PlansSink>,
    mirror: Arc<Mutex<HashMap<KeyId, u64>>>,
}

impl RuntimeSink for Forward {
    fn plans_loaded(&self, plans: HashMap<KeyId, String>) {
        self.plans.plans_loaded(plans);
    }

    fn credits_loaded(&self, credits: HashMap<KeyId, u64>) {
        *self.mirror.lock() = credits;
    }
}

fn runtime_error(e: RedisStoreError) -> RuntimeStoreError {
    RuntimeStoreError(e.to_string())
}

impl RuntimeStore for RuntimeState {
    fn set_plan<'a>(
        &'a self,
        key: KeyId,
        plan: &'a str,
    ) -> Pending<'a, Result<(), RuntimeStoreError>> {
        Pending::waiting(async move {
            RuntimeState::set_plan(self, key, plan)
                .await
                .map_err(runtime_error)
        })
    }

    fn remove_plan(&self, key: KeyId) -> Pending<'_, Result<bool, RuntimeStoreError>> {
        Pending::waiting(async move {
            RuntimeState::remove_plan(self, key)
                .await
                .map_err(runtime_error)
        })
    }

    fn set_credits(&self, key: KeyId, credits: u64) -> Pending<'_, Result<(), RuntimeStoreError>> {
        Pending::waiting(async move {
            RuntimeState::set_credits(self, key, credits)
                .await
                .map_err(runtime_error)?;
            self.mirror_credits(key, credits);
            Ok(())
        })
    }

    fn credits(&self, key: KeyId) -> Pending<'_, Result<u64, RuntimeStoreError>> {
        Pending::waiting(async move {
            match RuntimeState::credits(self, key).await {
                Ok(n) => Ok(n),
                Err(e) => {
                    tracing::debug!(error = %e, "credits read from the local copy");
                    Ok(self.mirrored_credits(key))
                }
            }
        })
    }

    fn spend_credits(
        &self,
        key: KeyId,
        need: u64,
        within: Duration,
    ) -> Pending<'_, Result<Option<u64>, RuntimeStoreError>> {
        if self.mirrored_credits(key) < need {
            return Pending::ready(Ok(None));
        }
        Pending::waiting(async move {
            let left = RuntimeState::spend_credits(self, key, need, within)
                .await
                .map_err(runtime_error)?;
            if let Some(left) = left {
                self.mirror_credits(key, left);
            }
            Ok(left)
        })
    }

    fn refund_credits(
        &self,
        key: KeyId,
        amount: u64,
    ) -> Pending<'_, Result<(), RuntimeStoreError>> {
        Pending::waiting(async move {
            let rest = RuntimeState::refund_credits(self, key, amount)
                .await
                .map_err(runtime_error)?;
            // The local copy gates spending (see `spend_credits`): without
            // the refund in it, this instance would refuse credits Redis has.
            self.mirror_credits(key, rest);
            Ok(())
        })
    }

    fn watch(&self, sink: Weak<dyn PlansSink>, every: Duration) -> bool {
        let mirror = self.mirror.clone();
        spawn_watch_with(self.clone(), every, move || {
            let plans = sink.upgrade()?;
            let forward: Arc<dyn RuntimeSink> = Arc::new(Forward {
                plans,
                mirror: mirror.clone(),
            });
            Some(forward)
        });
        true
    }
}
