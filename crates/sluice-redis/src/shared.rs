//! The shared store as the engine uses it: Redis behind a timeout, a circuit
//! breaker, an over-limit cache and a fallback.
//!
//! [`SharedStore::check`] always decides, and never waits longer than the
//! configured timeout:
//!
//! 1. A request identical to one refused moments ago is refused from the
//!    [over-limit cache](crate::over_limit) without a round trip.
//! 2. Otherwise, if the [breaker](crate::breaker) is closed (or this is its
//!    probe), Redis decides, within `timeout`.
//! 3. If Redis fails, times out, is not connected yet, or the breaker is
//!    open, the [`Fallback`] decides: a local in-memory limit of
//!    `1/expected_instances` of the global one (reserves included: see
//!    [`local`](crate::local)), allow, or deny. The decision says so
//!    ([`DecidedBy::Fallback`]).
//!
//! A check may carry a [reserve](SharedCheck::reserve), the cost the limit
//! must keep after its charge (priority classes, a delay limit decided as
//! its plain bucket). Redis applies it atomically with the charge; the
//! over-limit cache tells requests with different reserves apart.
//!
//! Only store *errors* trigger the fallback, never over-limit answers. The
//! breaker opening and closing is logged once each, not per request.
//!
//! **Coming back from an outage.** While the breaker's probe is out, other
//! requests wait for its outcome (within the timeout) instead of falling
//! back. What the fallback admitted during the outage is kept in a bounded
//! [ledger](crate::ledger) and charged to Redis when it is back: for a key,
//! before Redis decides for it again; for the rest, in the background.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_core::{Decision, LimitSpec, Limiter, Rate};
use sluice_store::{Checked, KeyId};
use smallvec::SmallVec;

use crate::breaker::{Admit, Breaker, BreakerState, Transition};
use crate::ledger::{Ledger, Owed};
use crate::local::LocalFallback;
use crate::over_limit::{OverLimitCache, Part};
use crate::store::{RedisCheck, RedisStore};
use crate::topology::Topology;
use crate::{RedisStoreError, StoreUrl};

/// Who decides while Redis cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// A local in-memory limiter at `1/expected_instances` of each limit.
    #[default]
    Local,
    /// Admit everything.
    Allow,
    /// Refuse everything (the server answers 503).
    Deny,
}

impl Fallback {
    /// `local`, `allow` or `deny`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// Who made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// Redis.
    Store,
    /// The over-limit cache, repeating a recent refusal from Redis.
    Cache,
    /// The fallback, because Redis could not.
    Fallback(Fallback),
}

/// How the shared store behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedOptions {
    /// The longest a decision waits for Redis.
    pub timeout: Duration,
    /// Who decides while Redis cannot.
    pub fallback: Fallback,
    /// How many instances share the limits: the local fallback admits
    /// `1/expected_instances` of each.
    pub expected_instances: u32,
    /// Failures in a row that open the breaker.
    pub breaker_failures: u32,
    /// How long the breaker stays open before it probes.
    pub breaker_open: Duration,
    /// Whether refused requests are cached until their retry time.
    pub over_limit_cache: bool,
    /// Whether concurrent decisions share script calls.
    pub batch: bool,
    /// The most keys the local fallback tracks per limit.
    pub local_max_keys: usize,
}

impl Default for SharedOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(10),
            fallback: Fallback::Local,
            expected_instances: 1,
            breaker_failures: 3,
            breaker_open: Duration::from_millis(500),
            over_limit_cache: true,
            batch: true,
            local_max_keys: 100_000,
        }
    }
}

/// One limit to check for one client key.
#[derive(Debug, Clone, Copy)]
pub struct SharedCheck<'a> {
    /// The limit's identity (scope, name, definition).
    pub limit_id: &'a str,
    /// Its definition, for the local fallback (the same bucket as
    /// `limiter`).
    pub spec: &'a LimitSpec,
    /// Its algorithm.
    pub limiter: &'a Limiter,
    /// The client key's keyed hash.
    pub key: KeyId,
    /// The request's cost.
    pub cost: u64,
    /// The cost that must still be left in the limit after the charge (0
    /// for none): see [`RedisCheck::reserve`]. The local fallback keeps the
    /// same share of it (see [`local`](crate::local)).
    pub reserve: u64,
}

/// A decision over every check of a request, and who made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedChecked {
    /// The decisions.
    pub checked: Checked,
    /// Who made them.
    pub by: DecidedBy,
}

/// Counters of what the shared store did, for metrics.
#[derive(Debug, Default)]
pub struct SharedCounters {
    /// Decisions made by Redis.
    pub store_decisions: AtomicU64,
    /// Calls that failed with an error.
    pub store_errors: AtomicU64,
    /// Calls that timed out.
    pub store_timeouts: AtomicU64,
    /// Refusals answered by the over-limit cache.
    pub cache_hits: AtomicU64,
    /// Decisions made by the fallback.
    pub fallback_decisions: AtomicU64,
}

/// Redis with a timeout, a breaker, a cache and a fallback. See the module
/// docs.
pub struct SharedStore {
    url: StoreUrl,
    store: arc_swap::ArcSwapOption<RedisStore>,
    breaker: Breaker,
    cache: Option<OverLimitCache>,
    local: LocalFallback,
    ledger: Ledger,
    /// Told when a probe's outcome is known.
    probe_done: tokio::sync::Notify,
    opts: SharedOptions,
    counters: SharedCounters,
    observer: std::sync::OnceLock<CallObserver>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("url", &self.url)
            .field("breaker", &self.breaker.state())
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

/// Called after every call to Redis with its duration and whether it
/// succeeded (for a latency histogram).
pub type CallObserver = Box<dyn Fn(Duration, bool) + Send + Sync>;

impl SharedStore {
    /// A shared store for `url`. It connects in the background (retrying
    /// with backoff); until then, the fallback decides. Must be called from
    /// within a tokio runtime.
    pub fn start(url: StoreUrl, opts: SharedOptions) -> Arc<Self> {
        let this = Arc::new(Self {
            url,
            store: arc_swap::ArcSwapOption::empty(),
            breaker: Breaker::new_open(opts.breaker_failures, opts.breaker_open),
            cache: opts.over_limit_cache.then(|| OverLimitCache::new(100_000)),
            local: LocalFallback::new(opts.expected_instances, opts.local_max_keys),
            ledger: Ledger::new(opts.local_max_keys),
            probe_done: tokio::sync::Notify::new(),
            opts,
            counters: SharedCounters::default(),
            observer: std::sync::OnceLock::new(),
        });
        tokio::spawn(connect_loop(Arc::downgrade(&this)));
        tokio::spawn(settle_loop(Arc::downgrade(&this)));
        this
    }

    /// Connects now, waiting at most `within`; the store is usable at once
    /// on success. (Without this, [`start`](Self::start) connects in the
    /// background.)
    pub async fn connect(&self, within: Duration) -> Result<(), RedisStoreError> {
        if self.store.load().is_some() {
            return Ok(());
        }
        let topology = tokio::time::timeout(within, Topology::connect(&self.url))
            .await
            .map_err(|_| RedisStoreError::Timeout(within))??;
        self.install(topology);
        Ok(())
    }

    fn install(&self, topology: Topology) {
        if self.store.load().is_none() {
            let store = if self.opts.batch {
                RedisStore::new(topology)
            } else {
                RedisStore::with_batching(topology, None)
            };
            self.store.store(Some(Arc::new(store)));
            if self.breaker.success() == Some(Transition::Closed) {
                tracing::info!(store = %self.url, "shared store connected");
            }
        }
    }

    /// A connection to the node that holds keys tagged `tag`; fails when
    /// Redis is not connected yet.
    pub(crate) fn conn(&self, tag: &str) -> Result<crate::store::Conn, RedisStoreError> {
        self.store
            .load()
            .as_ref()
            .map(|s| s.conn(tag))
            .ok_or(RedisStoreError::NotConnected)
    }

    /// The options.
    pub fn options(&self) -> &SharedOptions {
        &self.opts
    }

    /// The breaker's state: `Open` means the fallback is deciding.
    pub fn breaker_state(&self) -> BreakerState {
        self.breaker.state()
    }

    /// Sets the observer of Redis calls (once; later calls are ignored).
    pub fn observe_calls(&self, observer: CallObserver) {
        let _ = self.observer.set(observer);
    }

    /// What the store has done so far.
    pub fn counters(&self) -> &SharedCounters {
        &self.counters
    }

    /// Decides each check on its own, not all or nothing (for limits that
    /// only record, such as shadow mode), concurrently, so that the batcher
    /// sends them in one round trip rather than one after another.
    pub async fn check_each(&self, checks: &[SharedCheck<'_>]) -> Vec<SharedChecked> {
        let each = checks.iter().map(|c| self.check(std::slice::from_ref(c)));
        futures_util::future::join_all(each).await
    }

    /// Decides every check together, all or nothing. Never fails: when
    /// Redis cannot decide, the fallback does.
    pub async fn check(&self, checks: &[SharedCheck<'_>]) -> SharedChecked {
        // The cache's identity of this request; not computed without one.
        let parts: SmallVec<[Part; 4]> = match &self.cache {
            Some(_) => checks
                .iter()
                .map(|c| (limit_tag(c.limit_id), c.key, c.cost, c.reserve))
                .collect(),
            None => SmallVec::new(),
        };
        if let Some(cache) = &self.cache
            && let Some(decisions) = cache.lookup(&parts)
        {
            self.counters.cache_hits.fetch_add(1, Ordering::Relaxed);
            return SharedChecked {
                checked: Checked {
                    allowed: false,
                    decisions,
                },
                by: DecidedBy::Cache,
            };
        }
        let deadline = tokio::time::Instant::now() + self.opts.timeout;
        let admit = match self.breaker.admit() {
            Admit::Wait => self.wait_for_probe(deadline).await,
            admit => admit,
        };
        if admit != Admit::Skip {
            let result = self.settle_then_call(checks, deadline).await;
            let decided = self.on_result(checks, &parts, result);
            if admit == Admit::Probe {
                // Callers that waited for the probe ask the breaker again.
                self.probe_done.notify_waiters();
            }
            if let Some(decided) = decided {
                return decided;
            }
        }
        self.counters
            .fallback_decisions
            .fetch_add(1, Ordering::Relaxed);
        let checked = self.fallback(checks);
        if checked.allowed && self.opts.fallback != Fallback::Deny {
            // Owed to Redis, and charged there when it is back.
            self.ledger.owe(checks);
        }
        SharedChecked {
            checked,
            by: DecidedBy::Fallback(self.opts.fallback),
        }
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

    /// What Redis's answer means for the request: its decision, or `None`
    /// for the fallback (the store failed).
    fn on_result(
        &self,
        checks: &[SharedCheck<'_>],
        parts: &[Part],
        result: Result<Checked, RedisStoreError>,
    ) -> Option<SharedChecked> {
        match result {
            Ok(checked) => {
                if self.breaker.success() == Some(Transition::Closed) {
                    tracing::warn!(store = %self.url, "shared store is back: Redis decides again");
                }
                self.counters
                    .store_decisions
                    .fetch_add(1, Ordering::Relaxed);
                if !checked.allowed
                    && let Some(cache) = &self.cache
                {
                    cache.remember(parts, &checked.decisions);
                }
                Some(SharedChecked {
                    checked,
                    by: DecidedBy::Store,
                })
            }
            Err(RedisStoreError::Check(_)) => {
                // Redis answered: the cost can never pass. Not a store
                // failure; a refusal that no wait can lift.
                self.breaker.success();
                Some(SharedChecked {
                    checked: Checked {
                        allowed: false,
                        decisions: checks
                            .iter()
                            .map(|c| Decision {
                                allowed: c.cost <= c.spec.burst,
                                limit: c.spec.burst,
                                remaining: 0,
                                reset_after: 0,
                                retry_after: (c.cost > c.spec.burst).then_some(u64::MAX),
                                delay: 0,
                            })
                            .collect(),
                    },
                    by: DecidedBy::Store,
                })
            }
            Err(e) => {
                let counter = match e {
                    RedisStoreError::Timeout(_) => &self.counters.store_timeouts,
                    _ => &self.counters.store_errors,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if self.breaker.failure() == Some(Transition::Opened) {
                    tracing::warn!(
                        store = %self.url,
                        error = %e,
                        fallback = self.opts.fallback.name(),
                        "shared store failing: the fallback decides until it recovers"
                    );
                }
                None
            }
        }
    }

    /// Charges what the fallback admitted for these checks' keys during an
    /// outage, then decides the checks; both before `deadline`. What could
    /// not be charged is owed again.
    async fn settle_then_call(
        &self,
        checks: &[SharedCheck<'_>],
        deadline: tokio::time::Instant,
    ) -> Result<Checked, RedisStoreError> {
        if !self.ledger.is_empty() {
            let owed = self.ledger.take_for(checks);
            if !owed.is_empty() {
                // On a timeout, what was owed is owed again whole: charging
                // a part twice errs towards refusing, never admitting.
                let copy = owed.clone();
                match tokio::time::timeout_at(deadline, self.settle(owed)).await {
                    Ok(Ok(())) => {}
                    Ok(Err((e, back))) => {
                        self.ledger.put_back(back);
                        return Err(e);
                    }
                    Err(_) => {
                        self.ledger.put_back(copy);
                        return Err(RedisStoreError::Timeout(self.opts.timeout));
                    }
                }
            }
        }
        let budget = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.observed_call(checks, budget).await
    }

    /// Charges owed costs to Redis, each clamped at what its limit has
    /// left: the whole cost if it fits, else what is left. On a store
    /// failure, the entries not yet charged come back with the error.
    async fn settle(&self, owed: Vec<Owed>) -> Result<(), (RedisStoreError, Vec<Owed>)> {
        let Some(store) = self.store.load_full() else {
            return Err((RedisStoreError::NotConnected, owed));
        };
        let mut rest = owed.into_iter();
        while let Some(o) = rest.next() {
            match self.settle_one(&store, &o).await {
                Ok(charged) => {
                    self.ledger.settled.fetch_add(charged, Ordering::Relaxed);
                }
                // A cost Redis can never take: nothing to charge.
                Err(RedisStoreError::Check(_)) => {}
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
    async fn settle_one(&self, store: &RedisStore, o: &Owed) -> Result<u64, RedisStoreError> {
        let check = |cost| RedisCheck {
            limit_id: &o.limit_id,
            limiter: &o.limiter,
            key: o.key,
            cost,
            reserve: 0,
        };
        let cost = o.cost.min(o.burst);
        let first = store.check(&[check(cost)]).await?;
        let charged = if first.allowed {
            cost
        } else {
            let left = first.decisions.first().map_or(0, |d| d.remaining).min(cost);
            if left > 0 && store.check(&[check(left)]).await?.allowed {
                left
            } else {
                0
            }
        };
        tracing::debug!(
            limit = %o.limit_id,
            owed = o.cost,
            charged,
            first = ?first,
            "fallback admissions charged to Redis"
        );
        Ok(charged)
    }

    /// Charges everything still owed, a batch at a time, while Redis is
    /// deciding (after an outage, for keys no request has come back for).
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

    /// What the fallback admitted that Redis has not been told yet: (limit,
    /// key) pairs owed, cost charged since, and pairs dropped because the
    /// ledger was full.
    pub fn owed(&self) -> (usize, u64, u64) {
        (
            self.ledger.len(),
            self.ledger.settled.load(Ordering::Relaxed),
            self.ledger.dropped.load(Ordering::Relaxed),
        )
    }

    async fn observed_call(
        &self,
        checks: &[SharedCheck<'_>],
        budget: Duration,
    ) -> Result<Checked, RedisStoreError> {
        let Some(observer) = self.observer.get() else {
            return self.call_store(checks, budget).await;
        };
        let started = std::time::Instant::now();
        let result = self.call_store(checks, budget).await;
        observer(started.elapsed(), result.is_ok());
        result
    }

    async fn call_store(
        &self,
        checks: &[SharedCheck<'_>],
        budget: Duration,
    ) -> Result<Checked, RedisStoreError> {
        let Some(store) = self.store.load_full() else {
            return Err(RedisStoreError::NotConnected);
        };
        let redis_checks: SmallVec<[RedisCheck<'_>; 4]> = checks
            .iter()
            .map(|c| RedisCheck {
                limit_id: c.limit_id,
                limiter: c.limiter,
                key: c.key,
                cost: c.cost,
                reserve: c.reserve,
            })
            .collect();
        tokio::time::timeout(budget, store.check(&redis_checks))
            .await
            .map_err(|_| RedisStoreError::Timeout(self.opts.timeout))?
    }

    fn fallback(&self, checks: &[SharedCheck<'_>]) -> Checked {
        let retry = self.opts.breaker_open.max(Duration::from_secs(1));
        let retry = u64::try_from(retry.as_nanos()).unwrap_or(u64::MAX);
        match self.opts.fallback {
            Fallback::Allow => Checked {
                allowed: true,
                decisions: checks
                    .iter()
                    .map(|c| Decision::full(c.spec.burst))
                    .collect(),
            },
            Fallback::Deny => refuse_all(checks, retry),
            Fallback::Local => self.local.check(checks, retry),
        }
    }

    /// Forgets local fallback limits that no longer exist (after a reload).
    pub fn retain_local(&self, keep: impl Fn(&str) -> bool) {
        self.local.retain(keep);
    }

    /// How many limits the local fallback holds a share of.
    pub fn local_limits(&self) -> usize {
        self.local.len()
    }
}

/// Every check refused, empty, with `retry` as the wait: the `deny`
/// fallback's answer, and the local fallback's to a cost no share admits.
pub(crate) fn refuse_all(checks: &[SharedCheck<'_>], retry: u64) -> Checked {
    Checked {
        allowed: false,
        decisions: checks
            .iter()
            .map(|c| Decision {
                allowed: false,
                limit: c.spec.burst,
                remaining: 0,
                reset_after: retry,
                retry_after: Some(retry),
                delay: 0,
            })
            .collect(),
    }
}

/// One instance's share of a limit: rate and burst divided by `n` (the
/// burst rounded up, at least 1), so the window stays the same.
pub fn share_of(spec: &LimitSpec, n: u32) -> LimitSpec {
    let n64 = u64::from(n.max(1));
    let rate = spec
        .rate
        .period()
        .checked_mul(n64)
        .and_then(|p| Rate::new(spec.rate.amount(), p))
        .unwrap_or(spec.rate);
    LimitSpec {
        rate,
        burst: spec.burst.div_ceil(n64).max(1),
        ..*spec
    }
}

/// A stable, non-secret 64-bit tag of a limit's identity.
pub fn limit_tag(limit_id: &str) -> u64 {
    fnv1a(limit_id.as_bytes())
}

/// FNV-1a, 64 bits: a hash that is the same in every process and version
/// (limit tags in Redis key names, the shard ring, config versions). Not
/// for anything an attacker chooses and a table must survive.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Owed entries charged per round of [`settle_loop`].
const SETTLE_BATCH: usize = 256;

/// Charges what the fallback admitted during an outage, a batch every
/// 100 ms, once Redis decides again; ends with the store.
async fn settle_loop(this: Weak<SharedStore>) {
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Some(store) = this.upgrade() else { return };
        store.settle_some().await;
    }
}

async fn connect_loop(this: Weak<SharedStore>) {
    let mut backoff = Duration::from_millis(50);
    let mut warned = false;
    loop {
        let Some(store) = this.upgrade() else { return };
        match store.connect(Duration::from_secs(2)).await {
            Ok(()) => return,
            Err(e) => {
                if !warned {
                    tracing::warn!(
                        store = %store.url,
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
    use super::*;
    use sluice_core::AlgorithmKind;

    #[test]
    fn a_share_keeps_the_window_and_divides_rate_and_burst() {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::TokenBucket,
            rate: Rate::per_second(100),
            burst: 300,
            nodelay: false,
        };
        let s = share_of(&spec, 4);
        assert_eq!(s.burst, 75);
        assert_eq!(s.window(), spec.window());
        assert_eq!(
            u128::from(s.rate.amount()) * 4 * u128::from(spec.rate.period()),
            u128::from(spec.rate.amount()) * u128::from(s.rate.period())
        );
        assert_eq!(share_of(&spec, 1), spec);
        assert_eq!(share_of(&spec, 1000).burst, 1);
    }

    #[test]
    fn limit_tags_are_stable() {
        assert_eq!(limit_tag(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(limit_tag("a"), limit_tag("b"));
    }
}
