//! Coming back from an outage: connecting in the background, and charging
//! the store for what the fallback admitted while it could not decide.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_store::seam::Check;

use crate::breaker::BreakerState;
use crate::ledger::Owed;
use crate::{Protected, Remote, RemoteError};

/// Owed entries charged per round of the background settling.
const SETTLE_BATCH: usize = 256;

/// Starts a protected store's background tasks: connecting (when its
/// remote is not connected yet) and settling; they end with the store.
pub(crate) fn spawn<R: Remote>(this: &Arc<Protected<R>>) {
    if !this.remote.is_connected() {
        tokio::spawn(connect_loop(Arc::downgrade(this)));
    }
    tokio::spawn(settle_loop(Arc::downgrade(this)));
}

impl<R: Remote> Protected<R> {
    /// Charges owed costs to the store, each clamped at what its limit has
    /// left: the whole cost if it fits, else what is left. On a store
    /// failure, the entries not yet charged come back with the error.
    pub(crate) async fn settle(&self, owed: Vec<Owed>) -> Result<(), (RemoteError, Vec<Owed>)> {
        let mut rest = owed.into_iter();
        while let Some(o) = rest.next() {
            match self.settle_one(&o).await {
                Ok(charged) => {
                    self.ledger.settled.fetch_add(charged, Ordering::Relaxed);
                }
                // A cost the store can never take: nothing to charge.
                Err(RemoteError::Refused(_)) => {}
                Err(e) => {
                    let mut back = vec![o];
                    back.extend(rest);
                    return Err((e, back));
                }
            }
        }
        Ok(())
    }

    /// Charges one owed cost; returns what was charged.
    async fn settle_one(&self, o: &Owed) -> Result<u64, RemoteError> {
        let check = |cost| Check {
            counter: &o.counter,
            key: o.key,
            cost,
            reserve: 0,
        };
        let cost = o.cost.min(o.burst());
        let first = self.remote.try_check(&[check(cost)]).await?;
        let charged = if first.allowed {
            cost
        } else {
            let left = first.decisions.first().map_or(0, |d| d.remaining).min(cost);
            if left > 0 && self.remote.try_check(&[check(left)]).await?.allowed {
                left
            } else {
                0
            }
        };
        tracing::debug!(
            limit = %o.counter.def().id(),
            owed = o.cost,
            charged,
            "fallback admissions charged to the store"
        );
        Ok(charged)
    }

    /// Charges everything still owed, a batch at a time, while the store
    /// is deciding (after an outage, for keys no request has come back
    /// for).
    async fn settle_some(&self) {
        if self.ledger.is_empty() || self.breaker.state() != BreakerState::Closed {
            return;
        }
        let owed = self.ledger.take_some(SETTLE_BATCH);
        let copy = owed.clone();
        let timeout = self.opts.timeout.max(Duration::from_millis(100)) * 4;
        match tokio::time::timeout(timeout, self.settle(owed)).await {
            Ok(Ok(())) => {}
            Ok(Err((_, back))) => self.ledger.put_back(back),
            Err(_) => self.ledger.put_back(copy),
        }
    }
}

/// Charges what the fallback admitted during an outage, a batch every
/// 100 ms, once the store decides again; ends with the store.
async fn settle_loop<R: Remote>(this: Weak<Protected<R>>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(store) = this.upgrade() else { return };
        store.settle_some().await;
    }
}

/// Connects with backoff (50 ms doubling to 1 s), warning once; ends once
/// connected or with the store.
async fn connect_loop<R: Remote>(this: Weak<Protected<R>>) {
    let mut backoff = Duration::from_millis(50);
    let mut warned = false;
    loop {
        let Some(store) = this.upgrade() else { return };
        match store.connect(Duration::from_secs(2)).await {
            Ok(()) => return,
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        store = %store.remote.address(),
                        error = %e,
                        fallback = store.opts.fallback.name(),
                        "cannot reach the shared store yet; the fallback decides until it connects"
                    );
                    warned = true;
                }
            }
        }
        drop(store);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}
