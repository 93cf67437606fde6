//! Waiting for quota on outbound calls, per target (a host, or a credential).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::{LimitError, LimitSpec};
use sluice_store::seam::{Check, Checked, Counter, CounterDef, Store, StoreError};
use sluice_store::{KeyHasher, KeyId, MemoryStore, MemoryStoreConfig};

use crate::permit::Permit;
use crate::tokens::{Reserved, TokenCounter, TokenQuota};

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
    /// The default token quota, if any: each target gets its own.
    default_tokens: Option<TokenCounter>,
    target_tokens: HashMap<String, TokenCounter>,
    /// Tokens used beyond every quota and debt allowed, not charged.
    excess: Arc<AtomicU64>,
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
            default_tokens: None,
            target_tokens: HashMap::new(),
            excess: Arc::new(AtomicU64::new(0)),
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

    /// Gives every target (but those with a quota of their own) its own
    /// quota of tokens besides its calls: see [`TokenQuota`] and the
    /// [module on tokens](crate::tokens).
    pub fn with_tokens(mut self, quota: TokenQuota) -> Result<Self, LimitError> {
        self.default_tokens = Some(self.token_counter("egress-tokens:default", quota)?);
        Ok(self)
    }

    /// Gives `target` its own quota of tokens.
    pub fn with_target_tokens(
        mut self,
        target: &str,
        quota: TokenQuota,
    ) -> Result<Self, LimitError> {
        let counter = self.token_counter(&format!("egress-tokens:{target}"), quota)?;
        self.target_tokens.insert(target.to_owned(), counter);
        Ok(self)
    }

    fn token_counter(&self, id: &str, quota: TokenQuota) -> Result<TokenCounter, LimitError> {
        Ok(TokenCounter {
            counter: self.store.counter(CounterDef::new(id, quota.spec)?),
            quota,
        })
    }

    /// Tokens that calls used beyond their quota and the debt it allows,
    /// and that were therefore not charged, since the limiter was made.
    pub fn excess_tokens(&self) -> u64 {
        self.excess.load(Ordering::Relaxed)
    }

    /// Whether calls to `target` are counted in tokens too.
    pub fn counts_tokens(&self, target: &str) -> bool {
        self.tokens_of(target).is_some()
    }

    fn tokens_of(&self, target: &str) -> Option<&TokenCounter> {
        self.target_tokens
            .get(target)
            .or(self.default_tokens.as_ref())
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
        for tokens in self
            .default_tokens
            .iter_mut()
            .chain(self.target_tokens.values_mut())
        {
            tokens.counter = store.counter(tokens.counter.def().clone());
        }
        self.store = store;
        self.hasher = KeyHasher::from_secret(secret);
        self
    }

    /// The call's quota and, if it has one, its estimate of tokens: both
    /// or neither.
    async fn check(
        &self,
        calls: &Counter,
        tokens: Option<(&Counter, u64)>,
        key: KeyId,
    ) -> Result<Checked, StoreError> {
        let call = Check {
            counter: calls,
            key,
            cost: 1,
            reserve: 0,
            lease: None,
        };
        match tokens {
            None => self.store.check(&[call]).await,
            Some((counter, cost)) => {
                let tokens = Check {
                    counter,
                    key,
                    cost,
                    reserve: 0,
                    lease: None,
                };
                self.store.check(&[call, tokens]).await
            }
        }
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
    ///
    /// Where `target` has a [`TokenQuota`], the call also reserves
    /// `estimate` tokens (the quota's own estimate when `None`), and waits
    /// while the target is in debt; settle them with the answer through the
    /// [`Permit`]. Elsewhere `estimate` is ignored.
    pub async fn acquire(
        &self,
        target: &str,
        estimate: Option<u64>,
        deadline: Duration,
    ) -> Result<Permit, EgressError> {
        let start = Instant::now();
        let limit = self.targets.get(target).unwrap_or(&self.default);
        let tokens = self
            .tokens_of(target)
            .map(|t| (t, estimate.unwrap_or(t.quota.estimate)));
        let key = self.hasher.key_id(target);
        loop {
            let wait = match self.paused_for(target) {
                Some(pause) => pause,
                None => {
                    let checked = self
                        .check(limit, tokens.map(|(t, n)| (&t.counter, n)), key)
                        .await
                        .map_err(|e| match e {
                            StoreError::Impossible { .. } => EgressError::Impossible {
                                target: target.to_owned(),
                            },
                            source => EgressError::Store {
                                target: target.to_owned(),
                                source,
                            },
                        })?;
                    if checked.allowed {
                        let reserved = tokens.map(|(t, n)| Reserved {
                            store: self.store.clone(),
                            counter: t.counter.clone(),
                            key,
                            tokens: n,
                            max_debt: t.quota.max_debt,
                            excess: self.excess.clone(),
                        });
                        return Ok(Permit::new(reserved));
                    }
                    let retry = checked
                        .decisions
                        .iter()
                        .filter(|d| !d.allowed)
                        .filter_map(|d| d.retry_after)
                        .max();
                    Duration::from_nanos(retry.unwrap_or(1_000_000))
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
            .acquire("api.example.com", None, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, EgressError::Store { target, source: StoreError::ForeignCounter(_) } if target == "api.example.com"),
            "{err}"
        );
    }
}
