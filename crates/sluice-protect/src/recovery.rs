//! Coming back from an outage: connecting in the background, and charging
//! the store for what the fallback admitted while it could not decide.

use std::collections::VecDeque;
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
    /// left: the whole cost if it fits, else what is left. An entry leaves
    /// `owed` only once it is charged, so what is left there when this
    /// fails, or is dropped on a timeout, is what was not charged (and at
    /// most the one entry in flight, which the store may or may not have
    /// taken: charging it twice errs towards refusing, never admitting).
    pub(crate) async fn settle(&self, owed: &mut VecDeque<Owed>) -> Result<(), RemoteError> {
        while let Some(o) = owed.front() {
            match self.settle_one(o).await {
                Ok(charged) => {
                    self.ledger.settled.fetch_add(charged, Ordering::Relaxed);
                }
                // A cost the store can never take: nothing to charge.
                Err(RemoteError::Refused(_)) => {}
                Err(e) => return Err(e),
            }
            owed.pop_front();
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
        let mut owed = VecDeque::from(self.ledger.take_some(SETTLE_BATCH));
        let timeout = self.opts.timeout.max(Duration::from_millis(100)) * 4;
        // Whatever ends the round, what was not charged is owed again.
        let _ = tokio::time::timeout(timeout, self.settle(&mut owed)).await;
        if !owed.is_empty() {
            self.ledger.put_back(owed.into());
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::AtomicU64;

    use sluice_core::{AlgorithmKind, Decision, LimitSpec, Rate};
    use sluice_store::KeyId;
    use sluice_store::seam::{Checked, Counter, CounterDef, Pending, ProtectOptions, Slot};

    use super::*;

    /// A store that takes 2 ms per call and admits everything, counting
    /// what it was charged.
    #[derive(Debug, Default)]
    struct Slow {
        charged: AtomicU64,
        calls: Mutex<u64>,
    }

    impl Remote for Slow {
        fn slot(&self, _def: &CounterDef) -> Slot {
            Slot::empty()
        }
        fn try_check<'a>(
            &'a self,
            checks: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            Pending::waiting(async move {
                tokio::time::sleep(Duration::from_millis(2)).await;
                *self.calls.lock().unwrap() += 1;
                for c in checks {
                    self.charged.fetch_add(c.cost, Ordering::Relaxed);
                }
                let decisions = checks.iter().map(|_| Decision::full(1_000)).collect();
                Ok(Checked::by_store(true, decisions))
            })
        }
        fn try_refund<'a>(
            &'a self,
            checks: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            let decisions = checks.iter().map(|_| Decision::full(1_000)).collect();
            Pending::ready(Ok(Checked::by_store(true, decisions)))
        }
        fn connect(&self, _within: Duration) -> Pending<'_, Result<(), RemoteError>> {
            Pending::ready(Ok(()))
        }
        fn is_connected(&self) -> bool {
            true
        }
        fn kind(&self) -> &'static str {
            "test"
        }
        fn address(&self) -> String {
            "slow".into()
        }
    }

    /// A round that times out part-way owes again only what it did not
    /// charge (and at most the entry in flight): before, it put the whole
    /// batch back, and the next round charged the same keys again.
    #[tokio::test]
    async fn a_round_cut_short_does_not_charge_its_entries_twice() {
        let remote = Arc::new(Slow::default());
        let this = Protected::start(remote.clone(), ProtectOptions::default());
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(1_000),
            burst: 1_000,
            nodelay: true,
        };
        let counter = Counter::new(CounterDef::new("t", spec).unwrap(), Slot::empty());
        let owed = 300u64;
        this.ledger
            .owe((0..owed).map(|k| (&counter, KeyId(u128::from(k)), 1)));
        // Each round has 400 ms for 256 entries at 2 ms or more each: it is
        // cut short, and the next rounds finish the rest.
        let mut rounds = 0;
        while !this.ledger.is_empty() && rounds < 20 {
            this.settle_some().await;
            rounds += 1;
        }
        assert!(this.ledger.is_empty(), "owed left after {rounds} rounds");
        let charged = remote.charged.load(Ordering::Relaxed);
        assert!(
            charged <= owed + rounds,
            "{charged} charged for {owed} owed in {rounds} rounds"
        );
    }
}
