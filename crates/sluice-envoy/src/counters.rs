//! Where the Rate Limit Service counts: any [`Store`], the in-process
//! memory store or the shared store (Redis behind its protection), so that
//! every Sluice instance behind Envoy enforces one global limit.
//!
//! On the shared store Redis key names are `sluice:{<keyed hash of the
//! descriptor's entries>}:<limit tag>`: no raw descriptor value ever
//! reaches Redis.

use std::sync::Arc;

use sluice_core::Decision;
use sluice_store::KeyId;
use sluice_store::seam::{Check, Fallback, Store};
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
    /// Set when the store could not decide and its fallback did.
    pub fallback: Option<Fallback>,
}

/// The store the service's limits live in.
#[derive(Debug, Clone)]
pub struct Counters(pub Arc<dyn Store>);

impl Counters {
    fn checks<'a>(counts: &[Count<'a>]) -> SmallVec<[Check<'a>; 4]> {
        counts
            .iter()
            .map(|c| Check {
                counter: &c.limited.counter,
                key: c.key,
                cost: c.cost,
                reserve: 0,
            })
            .collect()
    }

    /// Decides every count together, all or nothing. No counts, no call.
    pub async fn check(&self, counts: &[Count<'_>]) -> Counted {
        if counts.is_empty() {
            return Counted {
                allowed: true,
                decisions: Vec::new(),
                fallback: None,
            };
        }
        let checks = Self::checks(counts);
        match self.0.check(&checks).await {
            Ok(checked) => Counted {
                allowed: checked.allowed,
                fallback: checked.fallback(),
                decisions: checked.decisions.into_vec(),
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

    /// Decides each count on its own, so that one never affects another
    /// (shadow-mode counts). On the shared store they go out together, so
    /// that its batching can put them in one round trip.
    pub async fn check_each(&self, counts: &[Count<'_>]) -> Counted {
        let checks = Self::checks(counts);
        let all = self.0.check_each(&checks).await;
        Counted {
            allowed: all.iter().all(|c| c.as_ref().is_ok_and(|c| c.allowed)),
            decisions: counts
                .iter()
                .zip(&all)
                .map(|(c, one)| {
                    one.as_ref()
                        .ok()
                        .and_then(|checked| checked.decisions.first().copied())
                        .unwrap_or(Decision::full(c.limited.spec.burst))
                })
                .collect(),
            fallback: all
                .iter()
                .find_map(|c| c.as_ref().ok().and_then(|c| c.fallback())),
        }
    }
}
