//! Where the Rate Limit Service counts: the in-process memory store, or the
//! shared store (Redis), so that every Sluice instance behind Envoy enforces
//! one global limit.
//!
//! On the shared store the decisions go through [`SharedStore::check`]: the
//! same timeout, circuit breaker, over-limit cache and fallback
//! (`local`, `allow`, `deny`) as the HTTP engine's. Redis key names are
//! `sluice:{<keyed hash of the descriptor's entries>}:<limit tag>`: no raw
//! descriptor value ever reaches Redis.

use std::sync::Arc;

use sluice_core::Decision;
use sluice_redis::{DecidedBy, Fallback, SharedCheck, SharedStore};
use sluice_store::{Check, Checked, KeyId, MemoryStore};
use smallvec::SmallVec;

use crate::rules::Limited;

/// One descriptor's check: its rule's limit, its key and its cost.
#[derive(Debug, Clone, Copy)]
pub struct Count<'a> {
    /// The rule's limit.
    pub limited: &'a Limited,
    /// The keyed hash of the descriptor's entries.
    pub key: KeyId,
    /// The hits to add (at most the limit's burst).
    pub cost: u64,
}

/// The decisions over some [`Count`]s, and who made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// Whether every count was admitted (and charged).
    pub allowed: bool,
    /// One decision per count, in order; missing ones mean the store could
    /// not decide.
    pub decisions: Vec<Decision>,
    /// Set when the shared store could not decide and its fallback did.
    pub fallback: Option<Fallback>,
}

/// The store the service's limits live in.
#[derive(Debug, Clone)]
pub enum Counters {
    /// This process's memory.
    Memory(Arc<MemoryStore>),
    /// Redis, shared by every instance, behind its fallback.
    Shared(Arc<SharedStore>),
}

impl Counters {
    /// Decides every count together, all or nothing. No counts, no call.
    pub async fn check(&self, counts: &[Count<'_>]) -> Counted {
        if counts.is_empty() {
            return Counted {
                allowed: true,
                decisions: Vec::new(),
                fallback: None,
            };
        }
        match self {
            Self::Memory(store) => {
                let checks: SmallVec<[Check<'_>; 4]> = counts
                    .iter()
                    .map(|c| Check {
                        limit: &c.limited.limit,
                        key: c.key,
                        cost: c.cost,
                    })
                    .collect();
                match store.check(&checks) {
                    Ok(Checked { allowed, decisions }) => Counted {
                        allowed,
                        decisions,
                        fallback: None,
                    },
                    Err(e) => {
                        tracing::error!(error = %e, "ShouldRateLimit: cannot decide");
                        Counted {
                            allowed: true,
                            decisions: Vec::new(),
                            fallback: None,
                        }
                    }
                }
            }
            Self::Shared(shared) => {
                let checks: SmallVec<[SharedCheck<'_>; 4]> = counts
                    .iter()
                    .map(|c| SharedCheck {
                        limit_id: c.limited.limit.id(),
                        spec: &c.limited.spec,
                        limiter: &c.limited.limiter,
                        key: c.key,
                        cost: c.cost,
                        reserve: 0,
                    })
                    .collect();
                let decided = shared.check(&checks).await;
                Counted {
                    allowed: decided.checked.allowed,
                    decisions: decided.checked.decisions,
                    fallback: match decided.by {
                        DecidedBy::Fallback(f) => Some(f),
                        DecidedBy::Store | DecidedBy::Cache => None,
                    },
                }
            }
        }
    }

    /// Decides each count on its own, so that one never affects another
    /// (shadow-mode counts). On the shared store they go out together, so
    /// that its batching can put them in one round trip.
    pub async fn check_each(&self, counts: &[Count<'_>]) -> Counted {
        let each = counts.iter().map(|c| self.check(std::slice::from_ref(c)));
        let all = futures_util::future::join_all(each).await;
        Counted {
            allowed: all.iter().all(|c| c.allowed),
            decisions: counts
                .iter()
                .zip(&all)
                .map(|(c, counted)| {
                    counted
                        .decisions
                        .first()
                        .copied()
                        .unwrap_or(Decision::full(c.limited.spec.burst))
                })
                .collect(),
            fallback: all.iter().find_map(|c| c.fallback),
        }
    }
}
