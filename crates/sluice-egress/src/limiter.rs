//! Waiting for quota on outbound calls, per target (a host, or a credential).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_core::{LimitError, LimitSpec};
use sluice_store::{Check, KeyHasher, Limit, MemoryStore, MemoryStoreConfig};

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
    /// The HTTP call itself failed.
    #[error(transparent)]
    Http(#[from] reqwest::Error),
}

/// Limits on outbound calls, by target. See the crate docs.
#[derive(Debug)]
pub struct EgressLimiter {
    store: MemoryStore,
    hasher: KeyHasher,
    default: Arc<Limit>,
    targets: HashMap<String, Arc<Limit>>,
    paused: Mutex<HashMap<String, Instant>>,
}

impl EgressLimiter {
    /// Every target gets `spec` (each its own quota).
    pub fn new(spec: &LimitSpec) -> Result<Self, LimitError> {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let default = store.limit("egress:default", spec.build()?);
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
        let limit = self.store.limit(&format!("egress:{target}"), spec.build()?);
        self.targets.insert(target.to_owned(), limit);
        Ok(self)
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
                    let decision = self
                        .store
                        .check_one(&Check {
                            limit,
                            key,
                            cost: 1,
                        })
                        .map_err(|_| EgressError::Impossible {
                            target: target.to_owned(),
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
