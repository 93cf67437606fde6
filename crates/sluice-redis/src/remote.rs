//! Redis as a [`Remote`] store, for [`Protected`](sluice_protect::Protected):
//! connected in the background, decided by [`RedisStore`].

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use sluice_core::Debited;
use sluice_protect::{Remote, RemoteError};
use sluice_store::KeyId;
use sluice_store::seam::{
    Check, Checked, Counter, CounterDef, NodeEviction, Pending, Slot, StoreError,
};
use smallvec::SmallVec;

use crate::eviction::{self, EvictingPolicy, EvictionWatch, Phase};
use crate::script::LimitParams;
use crate::store::{Conn, Prepared, RedisStore};
use crate::topology::Topology;
use crate::{RedisStoreError, StoreUrl};

/// The Redis deployment a [`StoreUrl`] names, connected on first
/// [`connect`](Remote::connect): until then every check fails with
/// [`RemoteError::NotConnected`] (and the protection's fallback decides).
pub struct RedisRemote {
    url: StoreUrl,
    batch: bool,
    store: ArcSwapOption<RedisStore>,
    eviction: EvictionWatch,
}

impl std::fmt::Debug for RedisRemote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisRemote")
            .field("url", &self.url)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

impl RedisRemote {
    /// Redis at `url`, not connected yet; `batch`: whether concurrent
    /// decisions share script calls (see [`BatchConfig`](crate::BatchConfig)).
    pub fn new(url: StoreUrl, batch: bool) -> Arc<Self> {
        Arc::new(Self {
            url,
            batch,
            store: ArcSwapOption::empty(),
            eviction: EvictionWatch::default(),
        })
    }

    /// Reads every node's eviction policy and evictions now (see
    /// [`eviction`]), for metrics. Fails when a node's policy can evict
    /// Sluice's keys and `accept` (`[store] accept_eviction`) is false; an
    /// unreadable policy is only logged. Does nothing while not connected.
    pub async fn check_eviction(&self, accept: bool, phase: Phase) -> Result<(), EvictingPolicy> {
        let Some(store) = self.store.load_full() else {
            return Ok(());
        };
        let Some(topology) = store.topology() else {
            return Ok(());
        };
        let readings = eviction::read_nodes(topology).await;
        self.eviction.record(readings, accept, phase)
    }

    /// Reads every node's eviction policy and evictions again every
    /// `every` (at least [`eviction::MIN_INTERVAL`]) while this store
    /// lives, logging what changed. Must be called within a tokio runtime.
    pub fn watch_eviction(self: &Arc<Self>, every: Duration, accept: bool) {
        let every = every.max(eviction::MIN_INTERVAL);
        let this = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(remote) = this.upgrade() else { return };
                // A policy that can evict is logged; too late to refuse.
                let _ = remote.check_eviction(accept, Phase::Running).await;
            }
        });
    }

    /// The URL.
    pub fn url(&self) -> &StoreUrl {
        &self.url
    }

    /// The connected store, if connected.
    pub fn store(&self) -> Option<Arc<RedisStore>> {
        self.store.load_full()
    }

    /// A connection to the node that holds keys tagged `tag`; fails when
    /// not connected yet.
    pub(crate) fn conn(&self, tag: &str) -> Result<Conn, RedisStoreError> {
        self.store
            .load()
            .as_ref()
            .map(|s| s.conn(tag))
            .ok_or(RedisStoreError::NotConnected)
    }

    async fn decide(&self, checks: &[Check<'_>]) -> Result<Checked, RemoteError> {
        let Some(store) = self.store.load_full() else {
            return Err(RemoteError::NotConnected);
        };
        let redis = prepared(checks)?;
        let checked = store.check_prepared(&redis).await.map_err(remote_error)?;
        Ok(Checked::by_store(checked.allowed, checked.decisions))
    }

    async fn give_back(&self, checks: &[Check<'_>]) -> Result<Checked, RemoteError> {
        let Some(store) = self.store.load_full() else {
            return Err(RemoteError::NotConnected);
        };
        let redis = prepared(checks)?;
        let checked = store.refund_prepared(&redis).await.map_err(remote_error)?;
        Ok(Checked::by_store(true, checked.decisions))
    }

    async fn charge_debt(
        &self,
        counter: &Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Result<Debited, RemoteError> {
        let Some(store) = self.store.load_full() else {
            return Err(RemoteError::NotConnected);
        };
        let check = Check {
            counter,
            key,
            cost: amount,
            reserve: 0,
            lease: None,
        };
        let redis = prepared(std::slice::from_ref(&check))?;
        store
            .debit_prepared(&redis[0], max_debt)
            .await
            .map_err(remote_error)
    }

    async fn connect_within(&self, within: Duration) -> Result<(), RemoteError> {
        if self.is_connected() {
            return Ok(());
        }
        let topology = tokio::time::timeout(within, Topology::connect(&self.url))
            .await
            .map_err(|_| RemoteError::Timeout(within))?
            .map_err(remote_error)?;
        if self.store.load().is_none() {
            let store = if self.batch {
                RedisStore::new(topology)
            } else {
                RedisStore::with_batching(topology, None)
            };
            // Only the first of concurrent connections is kept: a store's
            // instance id holds its concurrency slots, and one replaced
            // after deciding would leave them to expire unreleased.
            let none: Option<Arc<RedisStore>> = None;
            self.store.compare_and_swap(&none, Some(Arc::new(store)));
        }
        Ok(())
    }
}

/// The Redis store's state of a counter: the script's parameters of its
/// limit, computed once, when the counter is registered.
#[derive(Debug)]
struct RedisSlot {
    /// `None`: they cannot be computed; every check of the counter then
    /// fails (as it did when they were computed per request).
    params: Option<LimitParams>,
}

impl Remote for RedisRemote {
    fn slot(&self, def: &CounterDef) -> Slot {
        let params = LimitParams::compute(def.limiter());
        if params.is_none() {
            tracing::warn!(
                limit = %def.id(),
                "the shared store cannot decide this limit: its rate and burst overflow the script's arithmetic"
            );
        }
        Slot::new(Arc::new(RedisSlot { params }))
    }

    fn try_check<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>> {
        Pending::waiting(self.decide(checks))
    }

    fn try_refund<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Result<Checked, RemoteError>> {
        Pending::waiting(self.give_back(checks))
    }

    fn try_debit<'a>(
        &'a self,
        counter: &'a Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Pending<'a, Result<Debited, RemoteError>> {
        Pending::waiting(self.charge_debt(counter, key, amount, max_debt))
    }

    fn connect(&self, within: Duration) -> Pending<'_, Result<(), RemoteError>> {
        Pending::waiting(self.connect_within(within))
    }

    fn is_connected(&self) -> bool {
        self.store.load().is_some()
    }

    fn address(&self) -> String {
        self.url.to_string()
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    fn nodes(&self) -> Vec<NodeEviction> {
        self.eviction.nodes()
    }
}

/// Seam checks as the Redis store takes them, with the parameters their
/// counters' slots hold; fails for a counter not registered with a Redis
/// store (its slot is another store's).
fn prepared<'a>(checks: &[Check<'a>]) -> Result<SmallVec<[Prepared<'a>; 4]>, RemoteError> {
    checks
        .iter()
        .map(|c| {
            let def = c.counter.def();
            let slot = c
                .counter
                .state::<RedisSlot>()
                .map_err(RemoteError::Refused)?;
            Ok(Prepared {
                limit_id: def.id(),
                tag: def.tag(),
                params: slot.params,
                key: c.key,
                cost: c.cost,
                reserve: c.reserve,
                lease: c.lease,
            })
        })
        .collect()
}

/// A Redis store error as the protection sees it.
pub(crate) fn remote_error(e: RedisStoreError) -> RemoteError {
    match e {
        RedisStoreError::Check(e) => RemoteError::Refused(e.into()),
        RedisStoreError::NotConnected => RemoteError::NotConnected,
        RedisStoreError::Timeout(d) => RemoteError::Timeout(d),
        // The store answered: this limit cannot hold debt there.
        RedisStoreError::DebitUnsupported(_) => RemoteError::Refused(StoreError::Unsupported {
            store: "redis",
            operation: "debit of a sliding log whose window is not a whole number of microseconds",
        }),
        e if certificate_refused(&e) => {
            RemoteError::Misconfigured(format!("Redis's TLS certificate does not verify: {e}"))
        }
        e => RemoteError::Failed(e.to_string()),
    }
}

/// Whether `e` comes from a TLS certificate that did not verify (an
/// unknown issuer, another host's name, an expired certificate): no retry
/// will fix that. redis-rs keeps rustls's error only as text, so its
/// words are what is read (`rustls::Error::InvalidCertificate` is
/// displayed as "invalid peer certificate: …").
fn certificate_refused(e: &RedisStoreError) -> bool {
    matches!(e, RedisStoreError::Redis(_)) && e.to_string().contains("invalid peer certificate")
}
