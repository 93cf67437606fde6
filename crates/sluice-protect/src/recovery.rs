//! Coming back from an outage: connecting in the background, and charging
//! the store for what the fallback admitted while it could not decide.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_store::seam::Check;

use crate::breaker::BreakerState;
use crate::ledger::{Owed, Taken};
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
    /// `taken` only once it is charged, so what is left there when this
    /// fails, or is dropped on a timeout, is what was not charged (and at
    /// most the one entry in flight, which the store may or may not have
    /// taken: charging it twice errs towards refusing, never admitting).
    /// What refunds forgave of an entry while it was being charged is given
    /// back to the store after its charge.
    pub(crate) async fn settle(&self, taken: &mut Taken<'_>) -> Result<(), RemoteError> {
        while let Some(o) = taken.owed.front() {
            let charged = match self.settle_one(o).await {
                Ok(charged) => charged,
                // A cost the store can never take: nothing to charge.
                Err(RemoteError::Refused(_)) => 0,
                Err(e) => return Err(e),
            };
            let forgiven = taken.ledger().charged(o);
            let Some(o) = taken.owed.pop_front() else {
                break;
            };
            // What the store took beyond what is still owed: the refunds
            // of this key while it was out.
            let excess = charged.saturating_sub(o.cost.saturating_sub(forgiven));
            self.ledger
                .settled
                .fetch_add(charged - excess, Ordering::Relaxed);
            if excess > 0 {
                self.give_back_excess(&o, excess).await;
            }
        }
        Ok(())
    }

    /// Gives the store back what a charge took beyond what was owed once
    /// refunds had been forgiven, within the store's timeout; not retried
    /// if it fails or the settling is dropped meanwhile (the key errs
    /// towards refusing). The over-limit cache forgets the key's refusals,
    /// as for any refund.
    async fn give_back_excess(&self, o: &Owed, excess: u64) {
        let check = Check {
            counter: &o.counter,
            key: o.key,
            cost: excess,
            reserve: 0,
            lease: None,
        };
        let given = tokio::time::timeout(self.opts.timeout, self.remote.try_refund(&[check])).await;
        if let Some(cache) = &self.cache {
            cache.forget(o.counter.def().tag(), o.key);
        }
        match given {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                self.counts.store_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(error = %e, "a refund made while its key was settled was not given back");
            }
            Err(_) => {
                self.counts.store_timeouts.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    "a refund made while its key was settled was not given back in time"
                );
            }
        }
    }

    /// Charges one owed cost; returns what was charged.
    async fn settle_one(&self, o: &Owed) -> Result<u64, RemoteError> {
        if let Some(max_debt) = o.max_debt {
            return self.settle_debit(o, max_debt).await;
        }
        let check = |cost| Check {
            counter: &o.counter,
            key: o.key,
            cost,
            reserve: 0,
            lease: None,
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

    /// Charges a debit owed since an outage, as a debit: whatever the limit
    /// has left, into debt up to `max_debt`. What the store does not charge
    /// (its excess) is logged: never dropped silently.
    async fn settle_debit(&self, o: &Owed, max_debt: u64) -> Result<u64, RemoteError> {
        let debited = match (self.remote)
            .try_debit(&o.counter, o.key, o.cost, max_debt)
            .await
        {
            Err(RemoteError::Refused(e)) => {
                tracing::warn!(
                    limit = %o.counter.def().id(),
                    owed = o.cost,
                    error = %e,
                    "a debit made during an outage cannot be charged to the store"
                );
                return Err(RemoteError::Refused(e));
            }
            other => other?,
        };
        if debited.excess > 0 {
            tracing::warn!(
                limit = %o.counter.def().id(),
                owed = o.cost,
                charged = debited.charged,
                excess = debited.excess,
                "a debit made during an outage went past its max_debt when charged to the store"
            );
        } else {
            tracing::debug!(
                limit = %o.counter.def().id(),
                charged = debited.charged,
                "a debit made during an outage charged to the store"
            );
        }
        Ok(debited.charged)
    }

    /// Charges everything still owed, a batch at a time, while the store
    /// is deciding (after an outage, for keys no request has come back
    /// for).
    async fn settle_some(&self) {
        if self.ledger.is_empty() || self.breaker.state() != BreakerState::Closed {
            return;
        }
        let mut taken = self.ledger.take_some(SETTLE_BATCH);
        let timeout = self.opts.timeout.max(Duration::from_millis(100)) * 4;
        // Whatever ends the round, what was not charged is owed again
        // (when `taken` is dropped).
        let _ = tokio::time::timeout(timeout, self.settle(&mut taken)).await;
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
                    if let RemoteError::Misconfigured(_) = e {
                        tracing::error!(
                            store = %store.remote.address(),
                            error = %e,
                            fallback = store.opts.fallback.name(),
                            "cannot use the shared store until its configuration is fixed; the fallback decides until then"
                        );
                    } else {
                        tracing::warn!(
                            store = %store.remote.address(),
                            error = %e,
                            fallback = store.opts.fallback.name(),
                            "cannot reach the shared store yet; the fallback decides until it connects"
                        );
                    }
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
    use std::sync::atomic::AtomicU64;

    use sluice_core::{AlgorithmKind, Decision, LimitSpec, Rate};
    use sluice_store::KeyId;
    use sluice_store::seam::{Checked, Counter, CounterDef, Pending, ProtectOptions, Slot};

    use super::*;

    /// A store for these tests. Each check takes 2 ms, or, `gated`, waits
    /// for the test to open the gate; then it fails (`fails`) or admits
    /// everything. It keeps what its keys have used, which a refund takes
    /// down but never below nothing (a full bucket takes no refund).
    #[derive(Debug, Default)]
    struct TestRemote {
        gated: bool,
        fails: bool,
        gate: tokio::sync::Notify,
        used: AtomicU64,
    }

    impl TestRemote {
        fn gated(fails: bool) -> Arc<Self> {
            Arc::new(Self {
                gated: true,
                fails,
                ..Self::default()
            })
        }
    }

    impl Remote for TestRemote {
        fn slot(&self, _def: &CounterDef) -> Slot {
            Slot::empty()
        }
        fn try_check<'a>(
            &'a self,
            checks: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            Pending::waiting(async move {
                if self.gated {
                    self.gate.notified().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if self.fails {
                    return Err(RemoteError::Failed("down again".into()));
                }
                for c in checks {
                    self.used.fetch_add(c.cost, Ordering::Relaxed);
                }
                let decisions = checks.iter().map(|_| Decision::full(1_000)).collect();
                Ok(Checked::by_store(true, decisions))
            })
        }
        fn try_refund<'a>(
            &'a self,
            checks: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            for c in checks {
                let _ = self
                    .used
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                        Some(u.saturating_sub(c.cost))
                    });
            }
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
            "test".into()
        }
    }

    /// A round that times out part-way owes again only what it did not
    /// charge (and at most the entry in flight): before, it put the whole
    /// batch back, and the next round charged the same keys again.
    #[tokio::test]
    async fn a_round_cut_short_does_not_charge_its_entries_twice() {
        let remote = Arc::new(TestRemote::default());
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
        let charged = remote.used.load(Ordering::Relaxed);
        assert!(
            charged <= owed + rounds,
            "{charged} charged for {owed} owed in {rounds} rounds"
        );
    }

    /// The limit of the tests below: 10/s, a burst of 10.
    fn ten_a_second() -> CounterDef {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(10),
            burst: 10,
            nodelay: true,
        };
        CounterDef::new("t", spec).unwrap()
    }

    /// 3 owed for a key; a refund of 2 for it arrives while the 3 are being
    /// charged. Returns the store and what is owed afterwards. Before, the
    /// refund found nothing owed (the entry was out) and was lost: it went
    /// to the store ahead of the charge, where the key's bucket was full,
    /// and the store was charged, or owed again, the whole 3.
    async fn refund_while_settling(fails: bool) -> (Arc<TestRemote>, u64) {
        use sluice_store::seam::Store;
        let remote = TestRemote::gated(fails);
        let this = Protected::start(remote.clone(), ProtectOptions::default());
        let counter = this.counter(ten_a_second());
        let key = KeyId(7);
        let check = |cost| Check {
            counter: &counter,
            key,
            cost,
            reserve: 0,
            lease: None,
        };
        let pairs = crate::protected::pairs_of(&[check(0)]).unwrap();
        this.ledger.owe([(&pairs[0].remote, key, 3)]);
        let refund = async {
            // The settling has taken the entry and waits on the store.
            tokio::task::yield_now().await;
            this.refund(&[check(2)]).await.unwrap();
            remote.gate.notify_one();
        };
        tokio::join!(this.settle_some(), refund);
        let owed = this.ledger.take_for([(counter.def().tag(), key)]);
        let left = owed.owed.iter().map(|o| o.cost).sum();
        (remote, left)
    }

    #[tokio::test]
    async fn a_refund_while_its_key_is_charged_in_vain_is_owed_less() {
        let (remote, owed) = refund_while_settling(true).await;
        assert_eq!(owed, 1, "3 owed, 2 refunded");
        assert_eq!(remote.used.load(Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_refund_while_its_key_is_charged_is_given_back_after() {
        let (remote, owed) = refund_while_settling(false).await;
        assert_eq!(owed, 0);
        assert_eq!(
            remote.used.load(Ordering::Relaxed),
            1,
            "3 charged, the 2 refunded given back after"
        );
    }

    /// A request that settles its key's debt first, dropped while the
    /// store is charged (its client went away): what it took is owed
    /// again. Before, it was lost.
    #[tokio::test]
    async fn a_request_dropped_while_its_key_is_charged_leaves_it_owed() {
        use sluice_store::seam::Store;
        let remote = TestRemote::gated(false);
        let this = Protected::start(remote.clone(), ProtectOptions::default());
        let counter = this.counter(ten_a_second());
        let key = KeyId(7);
        let checks = [Check {
            counter: &counter,
            key,
            cost: 1,
            reserve: 0,
            lease: None,
        }];
        let pairs = crate::protected::pairs_of(&checks).unwrap();
        this.ledger.owe([(&pairs[0].remote, key, 3)]);
        let dropped = tokio::time::timeout(Duration::from_millis(5), async {
            this.check(&checks).await
        })
        .await;
        assert!(dropped.is_err(), "the store never answered");
        assert_eq!(this.ledger.len(), 1, "owed again");
        let owed = this.ledger.take_for([(counter.def().tag(), key)]);
        assert_eq!(owed.owed.iter().map(|o| o.cost).sum::<u64>(), 3);
    }
}
