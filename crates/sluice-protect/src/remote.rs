//! What the protection needs of a store over the network.

use std::time::Duration;

use sluice_core::Debited;
use sluice_store::KeyId;
use sluice_store::seam::{
    Check, Checked, Counter, CounterDef, NodeEviction, Pending, Slot, StoreError,
};

/// A store over the network, which can fail or be slow: Redis, say. It
/// decides a group of checks all or nothing, as a [`Store`] does, but may
/// answer with an error; [`Protected`](crate::Protected) turns it into a
/// `Store` that always decides.
///
/// [`Store`]: sluice_store::seam::Store
pub trait Remote: Send + Sync + std::fmt::Debug + 'static {
    /// The store's own state of a counter (its script arguments, say),
    /// made once when the counter is registered.
    fn slot(&self, def: &CounterDef) -> Slot;

    /// Decides every check together, all or nothing. Checks name this
    /// store's counters (their slots are this store's). The caller bounds
    /// the wait.
    fn try_check<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>>;

    /// Gives back each check's cost (see
    /// [`Store::refund`](sluice_store::seam::Store::refund)). The caller
    /// bounds the wait.
    fn try_refund<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>>;

    /// Charges `amount` to `key` of `counter` whatever it has left, into
    /// debt up to `max_debt` (see
    /// [`Store::debit`](sluice_store::seam::Store::debit)). The counter is
    /// this store's. The caller bounds the wait. A store that cannot debit
    /// answers [`RemoteError::Refused`] with [`StoreError::Unsupported`]
    /// (the default) and changes nothing.
    fn try_debit<'a>(
        &'a self,
        counter: &'a Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Pending<'a, Result<Debited, RemoteError>> {
        let _ = (counter, key, amount, max_debt);
        Pending::ready(Err(RemoteError::Refused(StoreError::Unsupported {
            store: self.kind(),
            operation: "debit",
        })))
    }

    /// Connects, if not connected yet, waiting at most `within`.
    fn connect(&self, within: Duration) -> Pending<'_, Result<(), RemoteError>>;

    /// Whether it is connected.
    fn is_connected(&self) -> bool;

    /// The store's address for logs, without any password.
    fn address(&self) -> String;

    /// What the store is, for metrics and the status page (`redis`).
    fn kind(&self) -> &'static str;

    /// What each of its nodes last said about evicting keys (see
    /// [`NodeEviction`]), for metrics; empty when it does not know.
    fn nodes(&self) -> Vec<NodeEviction> {
        Vec::new()
    }
}

/// Why a remote store did not decide.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RemoteError {
    /// It answered: the checks can never pass. Not a failure of the store.
    #[error(transparent)]
    Refused(#[from] StoreError),
    /// It has not connected yet.
    #[error("not connected yet")]
    NotConnected,
    /// It did not answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// It failed: the connection, or an error reply.
    #[error("{0}")]
    Failed(String),
    /// It cannot be used until an operator changes something: its TLS
    /// certificate does not verify, say. Retrying is not enough.
    #[error("{0}")]
    Misconfigured(String),
}
