//! Refunds on a protected store: cost given back to the remote store, or
//! to the local fallback's share while the remote cannot take it, with
//! the outage ledger and the over-limit cache kept true.

use sluice_store::seam::{BreakerState, Check, Checked, Counter, StoreError};
use smallvec::SmallVec;

use crate::over_limit::OverLimitCache;
use crate::protected::pairs_of;
use crate::{Protected, Remote, RemoteError};

impl<R: Remote> Protected<R> {
    /// Gives back each check's cost. What the fallback admitted for the key
    /// during an outage and the store was not charged yet is forgiven first
    /// (the [ledger](crate::ledger)); the rest goes to the remote store
    /// while its breaker is closed and it answers within the timeout, else
    /// to the local fallback's share (what it would admit next). A refund
    /// the store could not take is counted as a store error or timeout
    /// (towards opening the breaker, as a decision's) and not retried: a key errs towards refusing. However the call ends
    /// (dropped half way included), the over-limit cache forgets the
    /// refusals of these keys.
    pub(crate) async fn give_back(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        let pairs = pairs_of(checks)?;
        let _forget = ForgetRefusals {
            cache: self.cache.as_ref(),
            checks,
        };
        if self.breaker.state() == BreakerState::Closed {
            let remote: SmallVec<[Check<'_>; 4]> = checks
                .iter()
                .zip(&pairs)
                .map(|(c, p)| Check {
                    counter: &p.remote,
                    cost: self.ledger.forgive(c.counter.def().tag(), c.key, c.cost),
                    ..*c
                })
                .collect();
            match tokio::time::timeout(self.opts.timeout, self.remote.try_refund(&remote)).await {
                Ok(Ok(checked)) => {
                    self.breaker.success();
                    return Ok(checked);
                }
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "refund not taken by the shared store");
                    self.store_failed(&e);
                }
                Err(_) => {
                    tracing::debug!("refund not taken by the shared store in time");
                    self.store_failed(&RemoteError::Timeout(self.opts.timeout));
                }
            }
        } else {
            for c in checks {
                self.ledger.forgive(c.counter.def().tag(), c.key, c.cost);
            }
        }
        let shares: SmallVec<[&Counter; 4]> = pairs.iter().map(|p| &p.local).collect();
        self.local.refund(checks, &shares, self.opts.fallback)
    }
}

/// Once a refund is made, tried (it may have reached the store) or
/// dropped, the over-limit cache forgets the refusals of its keys.
struct ForgetRefusals<'a> {
    cache: Option<&'a OverLimitCache>,
    checks: &'a [Check<'a>],
}

impl Drop for ForgetRefusals<'_> {
    fn drop(&mut self) {
        if let Some(cache) = self.cache {
            for c in self.checks {
                cache.forget(c.counter.def().tag(), c.key);
            }
        }
    }
}
