//! Debits on a protected store: a cost settled after the response, charged
//! to the remote store while it takes it, else to the local fallback's
//! share and owed to the remote store (the [ledger](crate::ledger)) until
//! it is back.

use sluice_core::Debited;
use sluice_store::KeyId;
use sluice_store::seam::{BreakerState, Counter, StoreError};

use crate::protected::Pair;
use crate::{Protected, Remote, RemoteError};

impl<R: Remote> Protected<R> {
    /// Charges `amount` to `key` whatever the limit has left, into debt up
    /// to `max_debt` (see [`Store::debit`](sluice_store::seam::Store::debit)).
    ///
    /// While the breaker is closed, the remote store takes it, within the
    /// timeout (a failure or a timeout counts towards opening the breaker,
    /// as a decision's does), after what the ledger owes for the key (so that the
    /// fallback's admissions are charged before the debt). When it cannot
    /// (it fails, times out, is not connected, or the breaker is open), the
    /// local fallback's share of the limit is debited, so that its
    /// decisions see the debt, and the whole amount is owed to the remote
    /// store, charged as a debit when it is back; the answer is the local
    /// share's. A debit the ledger has no room for is counted dropped and
    /// logged. A debit the remote store answered but cannot hold (a limit
    /// it does not support debt for) is that error, and changes nothing.
    ///
    /// The over-limit cache holds refusals only: a debit, which only takes
    /// from a limit, leaves every refusal it holds true and makes it admit
    /// nothing.
    ///
    /// A debit that timed out may still have reached the store: it is then
    /// charged twice, which errs towards refusing, never admitting.
    pub(crate) async fn charge_debt(
        &self,
        counter: &Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Result<Debited, StoreError> {
        let pair = counter.state::<Pair>()?;
        if self.breaker.state() == BreakerState::Closed {
            let call = self.settle_then_debit(pair, key, amount, max_debt);
            match tokio::time::timeout(self.opts.timeout, call).await {
                Ok(Ok(debited)) => {
                    self.breaker.success();
                    return Ok(debited);
                }
                Ok(Err(RemoteError::Refused(e))) => return Err(e),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "debit not taken by the shared store: owed");
                    self.store_failed(&e);
                }
                Err(_) => {
                    tracing::debug!("debit not taken by the shared store in time: owed");
                    self.store_failed(&RemoteError::Timeout(self.opts.timeout));
                }
            }
        }
        let debited = self.local.debit(&pair.local, key, amount, max_debt)?;
        if !self.ledger.owe_debit(&pair.remote, key, amount, max_debt) {
            tracing::warn!(
                limit = %counter.def().id(),
                amount,
                "a debit made while the shared store is down could not be recorded (the outage ledger is full): the store will not be charged for it"
            );
        }
        Ok(debited)
    }

    /// What the ledger owes for the key, then the debit, on the remote
    /// store. What could not be charged of the owed stays owed.
    async fn settle_then_debit(
        &self,
        pair: &Pair,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Result<Debited, RemoteError> {
        if !self.ledger.is_empty() {
            let mut taken = self.ledger.take_for([(pair.remote.def().tag(), key)]);
            if !taken.is_empty() {
                self.settle(&mut taken).await?;
            }
        }
        (self.remote)
            .try_debit(&pair.remote, key, amount, max_debt)
            .await
    }
}
