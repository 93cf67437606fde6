//! Waiting for quota on outbound calls, per target (a host, or a credential).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::{Decision, LimitError, LimitSpec};
use sluice_store::seam::{Check, Counter, CounterDef, Store, StoreError};
use sluice_store::{KeyHasher, KeyId, MemoryStore, MemoryStoreConfig};

/// Why an outbound call may not go.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// The call would have to wait past its deadline. It was not sent.
    #[error(
        "the quota for `{target}` frees up in {wait:?}, past the deadline of {deadline:?}; the call was not sent"
    )]
    Deadline {
        /// The target.
        target: String,
        /// How long the call would still have to wait.
        wait: Duration,
        /// The deadline it was given.
        deadline: Duration,
    },
    /// One call costs more than the target's limit can ever admit.
    #[error("a call to `{target}` costs more than its limit can ever admit")]
    Impossible {
        /// The target.
        target: String,
    },
    /// The store could not decide the call (its limit is registered with
    /// another store: a wiring fault, not the call's). It was not sent.
    #[error("the limit of `{target}` could not be decided: {source}")]
    Store {
        /// The target.
        target: String,
        /// What the store said.
        source: StoreError,
    },
    /// The HTTP call itself failed.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Limits on outbound calls, by target. See the crate docs.
#[derive(Debug)]
pub struct EgressLimiter {
    store: Arc<dyn Store>,
    hasher: KeyHasher,
    /// The default limit's counter: each target gets its own quota of it.
    default: Counter,
    targets: HashMap<String, Counter>,
    paused: Mutex<HashMap<String, Instant>>,
}

impl EgressLimiter {
    /// Every target gets `spec` (each its own quota), counted in this
    /// process.
    pub fn new(spec: &LimitSpec) -> Result<Self, LimitError> {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
        let default = store.counter(CounterDef::new("egress:default", *spec)?);
        Ok(Self {
            store,
            hasher: KeyHasher::random(),
            default,
            targets: HashMap::new(),
            paused: Mutex::new(HashMap::new()),
        })
    }

    /// Gives `target` its own limit instead of the default.
    pub fn with_target(mut self, target: &str, spec: &LimitSpec) -> Result<Self, LimitError> {
        let def = CounterDef::new(&format!("egress:{target}"), *spec)?;
        self.targets
            .insert(target.to_owned(), self.store.counter(def));
        Ok(self)
    }

    /// Counts the quota in a shared store (Redis behind its protection),
    /// so that every process using the same store and `secret` respects
    /// one quota together. While Redis cannot decide, the store's fallback
    /// does (by default a local share of the quota).
    pub fn with_shared_store(mut self, store: Arc<dyn Store>, secret: &[u8]) -> Self {
        self.default = store.counter(self.default.def().clone());
        for counter in self.targets.values_mut() {
            *counter = store.counter(counter.def().clone());
        }
        self.store = store;
        self.hasher = KeyHasher::from_secret(secret);
        self
    }

    async fn check(&self, counter: &Counter, key: KeyId) -> Result<Decision, StoreError> {
        let check = Check {
            counter,
            key,
            cost: 1,
            reserve: 0,
        };
        Ok(self.store.check(&[check]).await?.single())
    }

    /// Stops calls to `target` for `pause` (the upstream said so).
    pub fn pause(&self, target: &str, pause: Duration) {
        let until = Instant::now() + pause;
        let mut paused = self.paused.lock();
        let entry = paused.entry(target.to_owned()).or_insert(until);
        *entry = (*entry).max(until);
        tracing::info!(
            target,
            ?pause,
            "the upstream asked to wait; pausing calls to it"
        );
    }

    fn paused_for(&self, target: &str) -> Option<Duration> {
        let mut paused = self.paused.lock();
        let until = *paused.get(target)?;
        let now = Instant::now();
        if until <= now {
            paused.remove(target);
            return None;
        }
        Some(until - now)
    }

    /// Waits until one call to `target` may go, or fails at once if that
    /// would take longer than `deadline`. Nothing is spent on a failure.
    pub async fn acquire(&self, target: &str, deadline: Duration) -> Result<(), EgressError> {
        let start = Instant::now();
        let limit = self.targets.get(target).unwrap_or(&self.default);
        let key = self.hasher.key_id(target);
        loop {
            let wait = match self.paused_for(target) {
                Some(pause) => pause,
                None => {
                    let decision = self.check(limit, key).await.map_err(|e| match e {
                        StoreError::Impossible { .. } => EgressError::Impossible {
                            target: target.to_owned(),
                        },
                        source => EgressError::Store {
                            target: target.to_owned(),
                            source,
                        },
                    })?;
                    if decision.allowed {
                        return Ok(());
                    }
                    Duration::from_nanos(decision.retry_after.unwrap_or(1_000_000))
                }
            };
            if start.elapsed() + wait > deadline {
                return Err(EgressError::Deadline {
                    target: target.to_owned(),
                    wait,
                    deadline,
                });
            }
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, Rate};

    fn spec(burst: u64) -> LimitSpec {
        LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(10),
            burst,
            nodelay: false,
        }
    }

    #[tokio::test]
    async fn a_limit_the_store_cannot_decide_is_a_store_error_not_an_impossible_call() {
        let mut limiter = EgressLimiter::new(&spec(5)).unwrap();
        // A counter of another kind of store: the memory store cannot read
        // its slot.
        let def = CounterDef::new("egress:default", spec(5)).unwrap();
        limiter.default = Counter::new(def, sluice_store::seam::Slot::empty());
        let err = limiter
            .acquire("api.example.com", Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EgressError::Store { target, source: StoreError::ForeignCounter(_) } if target == "api.example.com"),
            "{err}"
        );
    }
}
