//! A remote store as the engine uses it: behind a timeout, a circuit
//! breaker, an over-limit cache and a fallback.
//!
//! [`Protected::check`](sluice_store::seam::Store::check) always decides,
//! and never waits longer than the configured timeout:
//!
//! 1. A request identical to one refused moments ago is refused from the
//!    [over-limit cache](crate::over_limit) without a round trip.
//! 2. Otherwise, if the [breaker](crate::breaker) is closed (or this is its
//!    probe), the remote store decides, within `timeout`.
//! 3. If it fails, times out, is not connected yet, or the breaker is open,
//!    the [`Fallback`] decides: a local in-memory limit of
//!    `1/expected_instances` of the global one (reserves included: see
//!    [`local`](crate::local)), allow, or deny. The answer says so
//!    ([`DecidedBy::Fallback`]).
//!
//! Only store *failures* trigger the fallback, never over-limit answers.
//! The breaker opening and closing is logged once each, not per request,
//! and a breaker that flaps is logged at most every 10 s, with the count
//! of openings in between ([`flaps`](crate::flaps)).
//!
//! **Coming back from an outage.** While the breaker's probe is out, other
//! requests wait for its outcome (within the timeout) instead of falling
//! back. What the fallback admitted during the outage is kept in a bounded
//! [ledger](crate::ledger) and charged to the store when it is back: for a
//! key, before the store decides for it again; for the rest, in the
//! background ([`recovery`](crate::recovery)).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sluice_core::{Decision, Limiter};
use sluice_store::seam::{
    CallObserver, Check, Checked, Counter, CounterDef, DecidedBy, Fallback, Pending, RemoteHealth,
    Slot, Store, StoreError,
};
use smallvec::SmallVec;

use crate::breaker::{Admit, Breaker, BreakerState, Transition};
use crate::flaps::Flaps;
use crate::ledger::Ledger;
use crate::local::{LocalFallback, refuse_all};
use crate::over_limit::{OverLimitCache, Part, Stamp};
use crate::{ProtectOptions, Remote, RemoteError};

/// A counter's slot in a protected store: its counter in the remote store,
/// and this instance's share of it in the local fallback.
#[derive(Debug)]
pub(crate) struct Pair {
    pub(crate) remote: Counter,
    pub(crate) local: Counter,
}

/// Counters of what the protected store did, for metrics.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) store_decisions: AtomicU64,
    pub(crate) store_errors: AtomicU64,
    pub(crate) store_timeouts: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) fallback_decisions: AtomicU64,
}

/// A remote store behind a timeout, a breaker, a cache and a fallback. See
/// the module docs.
pub struct Protected<R: Remote> {
    pub(crate) remote: Arc<R>,
    pub(crate) breaker: Breaker,
    pub(crate) cache: Option<OverLimitCache>,
    pub(crate) local: LocalFallback,
    pub(crate) ledger: Ledger,
    /// Told when a probe's outcome is known.
    probe_done: tokio::sync::Notify,
    pub(crate) opts: ProtectOptions,
    pub(crate) counts: Counts,
    /// The breaker's transitions, for logging at most every 10 s.
    flaps: Flaps,
    observer: OnceLock<CallObserver>,
}

impl<R: Remote> std::fmt::Debug for Protected<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Protected")
            .field("remote", &self.remote)
            .field("breaker", &self.breaker.state())
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl<R: Remote> Protected<R> {
    /// Protects `remote`. Until it connects, the fallback decides; it is
    /// connected in the background (retrying with backoff), and what the
    /// fallback admitted is charged to it later. Must be called within a
    /// tokio runtime.
    pub fn start(remote: Arc<R>, opts: ProtectOptions) -> Arc<Self> {
        let this = Arc::new(Self {
            breaker: if remote.is_connected() {
                Breaker::new(opts.breaker_failures, opts.breaker_open)
            } else {
                Breaker::new_open(opts.breaker_failures, opts.breaker_open)
            },
            cache: opts.over_limit_cache.then(|| OverLimitCache::new(100_000)),
            local: LocalFallback::new(opts.expected_instances, opts.local_max_keys),
            ledger: Ledger::new(opts.local_max_keys),
            probe_done: tokio::sync::Notify::new(),
            remote,
            opts,
            counts: Counts::default(),
            flaps: Flaps::new(),
            observer: OnceLock::new(),
        });
        crate::recovery::spawn(&this);
        this
    }

    /// Connects now, waiting at most `within`; the store decides at once
    /// on success. (Without this, [`start`](Self::start) connects in the
    /// background.)
    pub async fn connect(&self, within: Duration) -> Result<(), RemoteError> {
        self.remote.connect(within).await?;
        if self.breaker.success() == Some(Transition::Closed) {
            tracing::info!(store = %self.remote.address(), "shared store connected");
        }
        Ok(())
    }

    /// The remote store.
    pub fn remote(&self) -> &Arc<R> {
        &self.remote
    }

    /// The options.
    pub fn options(&self) -> &ProtectOptions {
        &self.opts
    }

    /// The breaker's state: `Open` means the fallback is deciding.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Decides every check together, all or nothing. Never fails but for
    /// checks no store could decide (a foreign counter).
    async fn decide(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        // Nothing to ask: admitted, and no call the breaker could count
        // as the store answering (it could not have, during an outage).
        if checks.is_empty() {
            return Ok(Checked::by_store(true, Default::default()));
        }
        let pairs = pairs_of(checks)?;
        // A concurrency slot comes back whenever any instance releases it,
        // not at its retry time: a refusal that counts on one is never
        // cached.
        let cache = self.cache.as_ref().filter(|_| {
            !checks
                .iter()
                .any(|c| matches!(c.counter.def().limiter(), Limiter::Concurrency(_)))
        });
        // The cache's identity of this request; not computed without one.
        let parts: SmallVec<[Part; 4]> = match cache {
            Some(_) => checks
                .iter()
                .map(|c| (c.counter.def().tag(), c.key, c.cost, c.reserve))
                .collect(),
            None => SmallVec::new(),
        };
        if let Some(cache) = cache
            && let Some(decisions) = cache.lookup(&parts)
        {
            self.counts.cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Checked {
                allowed: false,
                decisions: decisions.into_iter().collect(),
                by: DecidedBy::Cache,
                share: 1,
            });
        }
        let remote: SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .zip(&pairs)
            .map(|(c, p)| Check {
                counter: &p.remote,
                ..*c
            })
            .collect();
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        let admit = match self.breaker.admit() {
            Admit::Wait => self.wait_for_probe(deadline).await,
            admit => admit,
        };
        if admit != Admit::Skip {
            // Read before the store is asked: a refund made meanwhile
            // voids what it answers (see `over_limit`).
            let stamp = cache.map(|c| (c, c.stamp(&parts)));
            // Reports the probe however this call ends: dropped half-way
            // (the client went away), the probe is given back.
            let probe = (admit == Admit::Probe).then(|| ProbeOut {
                breaker: &self.breaker,
                done: &self.probe_done,
            });
            let result = self.settle_then_call(&remote, deadline).await;
            let decided = self.on_result(&parts, stamp, result);
            drop(probe);
            if let Some(decided) = decided {
                return decided;
            }
        }
        self.counts
            .fallback_decisions
            .fetch_add(1, Ordering::Relaxed);
        let checked = self.fallback(checks, &pairs);
        if checked.allowed && self.opts.fallback != Fallback::Deny {
            // Owed to the store, and charged there when it is back.
            self.ledger
                .owe(remote.iter().map(|c| (c.counter, c.key, c.cost)));
        }
        Ok(checked)
    }

    /// Waits, until `deadline` at the latest, for the probe that is out,
    /// then says what to do: call the store if it closed the breaker, else
    /// fall back.
    async fn wait_for_probe(&self, deadline: tokio::time::Instant) -> Admit {
        let notified = self.probe_done.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.breaker.state() == BreakerState::HalfOpen {
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
        match self.breaker.state() {
            BreakerState::Closed => Admit::Call,
            _ => Admit::Skip,
        }
    }

    /// What the store's answer means for the request: its decision (or
    /// its refusal of a cost that can never pass), or `None` for the
    /// fallback (the store failed).
    fn on_result(
        &self,
        parts: &[Part],
        stamp: Option<(&OverLimitCache, Stamp)>,
        result: Result<Checked, RemoteError>,
    ) -> Option<Result<Checked, StoreError>> {
        match result {
            Ok(checked) => {
                if self.breaker.success() == Some(Transition::Closed) && self.flaps.closed() {
                    tracing::warn!(store = %self.remote.address(), "shared store is back: it decides again");
                }
                self.counts.store_decisions.fetch_add(1, Ordering::Relaxed);
                if !checked.allowed
                    && let Some((cache, stamp)) = stamp
                {
                    cache.remember(parts, stamp, &checked.decisions);
                }
                Some(Ok(checked))
            }
            Err(RemoteError::Refused(e)) => {
                // The store answered: the cost can never pass. Not a store
                // failure; the same error the memory store gives.
                self.breaker.success();
                Some(Err(e))
            }
            Err(e) => {
                self.store_failed(&e);
                None
            }
        }
    }

    /// A call the store failed (an error or a timeout; not a refusal):
    /// counted, and told to the breaker, which opens after
    /// `breaker_failures` in a row, whatever the call was (a decision, a
    /// refund, a debit). The opening is logged.
    pub(crate) fn store_failed(&self, e: &RemoteError) {
        let counter = match e {
            RemoteError::Timeout(_) => &self.counts.store_timeouts,
            _ => &self.counts.store_errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let opened = self.breaker.failure() == Some(Transition::Opened);
        let unreported = self.breaker.state() != BreakerState::Closed && !self.flaps.open_logged();
        if (opened || unreported)
            && let Some(unlogged) = self.flaps.opened()
        {
            if let RemoteError::Misconfigured(_) = e {
                tracing::error!(
                    store = %self.remote.address(),
                    error = %e,
                    unlogged_openings = unlogged,
                    fallback = self.opts.fallback.name(),
                    "shared store refused: fix its configuration; the fallback decides until then"
                );
            } else {
                tracing::warn!(
                    store = %self.remote.address(),
                    error = %e,
                    unlogged_openings = unlogged,
                    fallback = self.opts.fallback.name(),
                    "shared store failing: the fallback decides until it recovers"
                );
            }
        }
    }

    /// Charges what the fallback admitted for these checks' keys during an
    /// outage, then decides the checks; both before `deadline`. What could
    /// not be charged is owed again.
    async fn settle_then_call(
        &self,
        checks: &[Check<'_>],
        deadline: tokio::time::Instant,
    ) -> Result<Checked, RemoteError> {
        if !self.ledger.is_empty() {
            let mut taken = self
                .ledger
                .take_for(checks.iter().map(|c| (c.counter.def().tag(), c.key)));
            if !taken.is_empty() {
                // What was not charged, on a failure, a timeout or a
                // dropped request, is owed again (see `settle`).
                let settled = tokio::time::timeout_at(deadline, self.settle(&mut taken)).await;
                drop(taken);
                match settled {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(RemoteError::Timeout(self.opts.timeout)),
                }
            }
        }
        let budget = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.observed_call(checks, budget).await
    }

    async fn observed_call(
        &self,
        checks: &[Check<'_>],
        budget: Duration,
    ) -> Result<Checked, RemoteError> {
        let call = tokio::time::timeout(budget, self.remote.try_check(checks));
        let Some(observer) = self.observer.get() else {
            return call
                .await
                .map_err(|_| RemoteError::Timeout(self.opts.timeout))?;
        };
        let started = std::time::Instant::now();
        let result = call
            .await
            .map_err(|_| RemoteError::Timeout(self.opts.timeout))
            .and_then(|r| r);
        observer(started.elapsed(), result.is_ok());
        result
    }

    fn fallback(&self, checks: &[Check<'_>], pairs: &[&Pair]) -> Checked {
        let retry = self.opts.breaker_open.max(Duration::from_secs(1));
        let retry = u64::try_from(retry.as_nanos()).unwrap_or(u64::MAX);
        match self.opts.fallback {
            Fallback::Allow => Checked {
                allowed: true,
                decisions: checks
                    .iter()
                    .map(|c| Decision::full(c.counter.def().spec().burst))
                    .collect(),
                by: DecidedBy::Fallback(Fallback::Allow),
                share: 1,
            },
            Fallback::Deny => refuse_all(checks, retry, Fallback::Deny),
            Fallback::Local => {
                let shares: SmallVec<[&Counter; 4]> = pairs.iter().map(|p| &p.local).collect();
                self.local.check(checks, &shares, retry)
            }
        }
    }

    /// How many limits the local fallback holds a share of now.
    pub fn local_limits(&self) -> usize {
        self.local.len()
    }
}

impl<R: Remote> Store for Protected<R> {
    fn counter(&self, def: CounterDef) -> Counter {
        let pair = Pair {
            remote: Counter::new(def.clone(), self.remote.slot(&def)),
            local: self.local.share(&def),
        };
        Counter::new(def, Slot::new(Arc::new(pair)))
    }

    fn fresh_counter(&self, def: CounterDef) -> Counter {
        // The remote's state is named by the definition; the local share's
        // starts anew.
        let pair = Pair {
            remote: Counter::new(def.clone(), self.remote.slot(&def)),
            local: self.local.fresh_share(&def),
        };
        Counter::new(def, Slot::new(Arc::new(pair)))
    }

    fn check<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Pending::waiting(self.decide(checks))
    }

    fn refund<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Pending::waiting(self.give_back(checks))
    }

    fn debit<'a>(
        &'a self,
        counter: &'a Counter,
        key: sluice_store::KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Pending<'a, Result<sluice_core::Debited, StoreError>> {
        Pending::waiting(self.charge_debt(counter, key, amount, max_debt))
    }

    fn check_each<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Vec<Result<Checked, StoreError>>> {
        // Concurrently, so that a batching remote sends them in one round
        // trip rather than one after another.
        let each = checks.iter().map(|c| self.decide(std::slice::from_ref(c)));
        Pending::waiting(futures_util::future::join_all(each))
    }

    fn purge_idle(&self) -> usize {
        self.local.purge_idle()
    }

    fn kind(&self) -> &'static str {
        self.remote.kind()
    }

    fn remote_health(&self) -> Option<RemoteHealth> {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let (pairs, settled, dropped) = self.ledger.totals();
        Some(RemoteHealth {
            address: self.remote.address(),
            connected: self.remote.is_connected(),
            breaker: self.breaker.state(),
            fallback: self.opts.fallback,
            store_decisions: load(&self.counts.store_decisions),
            store_errors: load(&self.counts.store_errors),
            store_timeouts: load(&self.counts.store_timeouts),
            cache_hits: load(&self.counts.cache_hits),
            fallback_decisions: load(&self.counts.fallback_decisions),
            owed_pairs: pairs,
            owed_settled: settled,
            owed_dropped: dropped,
            local_limits: self.local.len(),
            nodes: self.remote.nodes(),
        })
    }

    fn observe_calls(&self, observer: CallObserver) {
        let _ = self.observer.set(observer);
    }
}

/// Each check's pair of counters (remote, local share); fails for a
/// counter of another store.
pub(crate) fn pairs_of<'c>(checks: &[Check<'c>]) -> Result<SmallVec<[&'c Pair; 4]>, StoreError> {
    checks.iter().map(|c| c.counter.state::<Pair>()).collect()
}

/// The probe a call is making. When it ends, however it ends, the callers
/// that waited for it ask the breaker again; a probe the store never
/// answered (its call was dropped) is given back first, so the breaker
/// cannot stay half-open.
struct ProbeOut<'a> {
    breaker: &'a Breaker,
    done: &'a tokio::sync::Notify,
}

impl Drop for ProbeOut<'_> {
    fn drop(&mut self) {
        // After an answer the breaker is closed or open again, and this
        // does nothing.
        self.breaker.abandon_probe();
        self.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    use sluice_store::KeyId;

    /// A store that never answers: not connected (the fallback decides
    /// everything), or connected but failing every call (Redis gone after
    /// the start).
    #[derive(Debug)]
    struct Broken {
        connected: bool,
    }

    /// Never connected.
    const DOWN: Broken = Broken { connected: false };
    /// Connected, then gone.
    const FAILING: Broken = Broken { connected: true };

    impl Broken {
        fn error<T>(&self) -> Pending<'_, Result<T, RemoteError>> {
            Pending::ready(Err(if self.connected {
                RemoteError::Failed("broken pipe".into())
            } else {
                RemoteError::NotConnected
            }))
        }
    }

    impl Remote for Broken {
        fn slot(&self, _def: &CounterDef) -> Slot {
            Slot::empty()
        }
        fn try_check<'a>(
            &'a self,
            _: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            self.error()
        }
        fn try_refund<'a>(
            &'a self,
            _: &'a [Check<'a>],
        ) -> Pending<'a, Result<Checked, RemoteError>> {
            self.error()
        }
        fn try_debit<'a>(
            &'a self,
            _: &'a Counter,
            _: KeyId,
            _: u64,
            _: u64,
        ) -> Pending<'a, Result<sluice_core::Debited, RemoteError>> {
            self.error()
        }
        fn connect(&self, _: Duration) -> Pending<'_, Result<(), RemoteError>> {
            if self.connected {
                Pending::ready(Ok(()))
            } else {
                self.error()
            }
        }
        fn is_connected(&self) -> bool {
            self.connected
        }
        fn kind(&self) -> &'static str {
            "test"
        }
        fn address(&self) -> String {
            "broken".into()
        }
    }

    /// A protected store over [`FAILING`], with one limit registered.
    fn failing() -> (Arc<Protected<Broken>>, Counter) {
        let this = Protected::start(Arc::new(FAILING), ProtectOptions::default());
        let spec = LimitSpec {
            algorithm: AlgorithmKind::FixedWindow,
            rate: Rate::per_minute(100),
            burst: 100,
            nodelay: false,
        };
        let counter = this.counter(CounterDef::new("f", spec).unwrap());
        (this, counter)
    }

    /// An empty group of checks (a request whose every limit is decided
    /// on its own) asks the store nothing, so it is no sign that the store
    /// answers: it does not reset the failures that open the breaker.
    #[tokio::test]
    async fn an_empty_check_between_failures_leaves_the_breaker_to_open() {
        let (this, counter) = failing();
        let one = [Check {
            counter: &counter,
            key: KeyId(4),
            cost: 1,
            reserve: 0,
            lease: None,
        }];
        for _ in 0..this.opts.breaker_failures {
            assert_eq!(this.breaker.state(), BreakerState::Closed);
            assert!(this.check(&[]).await.unwrap().allowed);
            this.check(&one).await.unwrap();
        }
        assert_eq!(this.breaker.state(), BreakerState::Open);
    }

    /// Debits and refunds that fail open the breaker as decisions do:
    /// a client whose calls only record (Envoy's stream-done hits, a
    /// settlement) must not wait for the store's timeout on every call of
    /// an outage.
    #[tokio::test]
    async fn failed_debits_and_refunds_open_the_breaker() {
        for refunds in [false, true] {
            let (this, counter) = failing();
            let failures = this.opts.breaker_failures;
            let one = [Check {
                counter: &counter,
                key: KeyId(3),
                cost: 1,
                reserve: 0,
                lease: None,
            }];
            for _ in 0..failures {
                assert_eq!(this.breaker.state(), BreakerState::Closed);
                if refunds {
                    this.refund(&one).await.unwrap();
                } else {
                    this.debit(&counter, KeyId(3), 1, 10).await.unwrap();
                }
            }
            assert_eq!(
                this.breaker.state(),
                BreakerState::Open,
                "refunds: {refunds}"
            );
            assert_eq!(
                this.remote_health().unwrap().store_errors,
                u64::from(failures)
            );
        }
    }

    /// In an outage, a debit goes to the local share, which then refuses
    /// the key while in debt, and is owed to the store as a debit; a
    /// refund forgives it first.
    #[tokio::test]
    async fn a_debit_in_an_outage_goes_to_the_local_share_and_is_owed() {
        let this = Protected::start(Arc::new(DOWN), ProtectOptions::default());
        let spec = LimitSpec {
            algorithm: AlgorithmKind::FixedWindow,
            rate: Rate::per_minute(1),
            burst: 3,
            nodelay: false,
        };
        let counter = this.counter(CounterDef::new("d", spec).unwrap());
        let key = KeyId(9);
        let debited = this.debit(&counter, key, 6, 2).await.unwrap();
        assert_eq!((debited.charged, debited.excess), (5, 1));
        let peek = [Check {
            counter: &counter,
            key,
            cost: 0,
            reserve: 0,
            lease: None,
        }];
        let refused = this.check(&peek).await.unwrap();
        assert!(!refused.allowed, "in debt on the local share");
        assert_eq!(refused.fallback(), Some(Fallback::Local));
        assert_eq!(this.ledger.forgive(counter.def().tag(), key, 2), 0);
        let owed = this.ledger.take_for([(counter.def().tag(), key)]);
        let owed: Vec<_> = owed.owed.iter().map(|o| (o.cost, o.max_debt)).collect();
        assert_eq!(owed, [(4, Some(2))], "the whole amount, less the refund");
    }

    /// In an outage, a refund is taken off what the ledger owes the store
    /// for the key, and given to the local share that admitted it.
    #[tokio::test]
    async fn a_refund_in_an_outage_is_forgiven_and_given_to_the_local_share() {
        let this = Protected::start(Arc::new(DOWN), ProtectOptions::default());
        let spec = LimitSpec {
            algorithm: AlgorithmKind::TokenBucket,
            rate: Rate::per_minute(1),
            burst: 3,
            nodelay: false,
        };
        let counter = this.counter(CounterDef::new("r", spec).unwrap());
        let key = KeyId(7);
        let at = |cost| {
            [Check {
                counter: &counter,
                key,
                cost,
                reserve: 0,
                lease: None,
            }]
        };
        for _ in 0..3 {
            assert!(this.check(&at(1)).await.unwrap().allowed);
        }
        assert!(
            !this.check(&at(1)).await.unwrap().allowed,
            "the share is used up"
        );
        let refunded = this.refund(&at(2)).await.unwrap();
        assert_eq!(refunded.decisions[0].remaining, 2);
        assert_eq!(refunded.fallback(), Some(Fallback::Local));
        // Of the 3 owed, 2 were forgiven.
        let owed = this.ledger.take_for([(counter.def().tag(), key)]);
        assert_eq!(owed.owed.iter().map(|o| o.cost).sum::<u64>(), 1);
        assert!(
            this.check(&at(2)).await.unwrap().allowed,
            "the share has 2 again"
        );
    }
}
