//! The runtime-state seam: plans assigned at run time and burst credits,
//! wherever they are kept.

use std::collections::HashMap;
use std::sync::Weak;
use std::time::Duration;

use super::Pending;
use crate::key::KeyId;

/// Why a runtime change or read did not happen; nothing changed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the runtime state store did not answer: {0}")]
pub struct RuntimeStoreError(pub String);

/// Where runtime plan assignments and burst credits are kept: this
/// process's memory, or a store every instance shares.
///
/// Plans are read on the request path from the engine's own copy; this
/// trait is where they are written, and (for a shared store) where every
/// instance's copy comes from ([`watch`](Self::watch)). Credits are kept
/// here whole: the engine asks only when a request would need them.
pub trait RuntimeStore: Send + Sync + std::fmt::Debug {
    /// Puts a key on a plan.
    fn set_plan<'a>(
        &'a self,
        key: KeyId,
        plan: &'a str,
    ) -> Pending<'a, Result<(), RuntimeStoreError>>;

    /// Removes a key's assignment; whether it had one here.
    fn remove_plan(&self, key: KeyId) -> Pending<'_, Result<bool, RuntimeStoreError>>;

    /// Sets a key's balance (0 removes it).
    fn set_credits(&self, key: KeyId, credits: u64) -> Pending<'_, Result<(), RuntimeStoreError>>;

    /// A key's balance now.
    fn credits(&self, key: KeyId) -> Pending<'_, Result<u64, RuntimeStoreError>>;

    /// Debits `need` if the balance covers it, atomically (two instances
    /// never spend the same credit), waiting at most `within`: the balance
    /// left, or `None` when it does not cover it (nothing debited).
    fn spend_credits(
        &self,
        key: KeyId,
        need: u64,
        within: Duration,
    ) -> Pending<'_, Result<Option<u64>, RuntimeStoreError>>;

    /// Gives back credits spent on a request that was refused after all.
    fn refund_credits(&self, key: KeyId, amount: u64)
    -> Pending<'_, Result<(), RuntimeStoreError>>;

    /// Whether every answer is [ready](super::Pending::Ready) at once (a
    /// store in this process): a decision that spends credits on it then
    /// completes on its first poll.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// For a store shared by instances: keeps `sink` current with the
    /// plans every instance assigns, polling every `every` in the
    /// background until the sink is dropped. Returns whether it did (not
    /// for memory, where the engine's own copy is the state). Must be
    /// called within a tokio runtime.
    fn watch(&self, _sink: Weak<dyn PlansSink>, _every: Duration) -> bool {
        false
    }
}

/// What receives the plans a shared runtime store holds.
pub trait PlansSink: Send + Sync {
    /// Every runtime assignment in the store now, by key id.
    fn plans_loaded(&self, plans: HashMap<KeyId, String>);
}
