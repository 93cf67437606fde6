//! Burst credits: a request refused only by its plan's limits is admitted
//! when its key has the credits to pay for it.
//!
//! The credits are debited first, atomically in the runtime state store
//! (two instances never spend the same credit), then the request's other
//! limits are checked (with their reserves, as decided before): they must
//! still admit it, and are charged. If they refuse, or a fallback decided
//! them, the credits are given back.

use sluice_core::{Clock, Decision};
use sluice_store::KeyId;
use sluice_store::seam::{Check, Checked, Decisions};
use smallvec::SmallVec;

use super::Engine;
use super::decide::{Gate, named};
use super::plan::Plan;
use super::verdict::DecideError;

/// A request refused only by limits of its plan counted by the client key:
/// what burst credits would have to pay.
pub(super) struct Claim {
    /// The client key.
    key: KeyId,
    /// The credits it would cost: the largest cost among the refusing
    /// limits.
    need: u64,
    /// The refusing limits (indices into the plan's enforced limits).
    violated: SmallVec<[usize; 4]>,
    /// The other enforced limits, which must still admit the request.
    rest: SmallVec<[usize; 4]>,
}

impl Claim {
    /// The claim of a refused request; `None` when a limit outside the
    /// client's plan refused it (or nothing did).
    pub(super) fn of(plan: &Plan<'_>, checked: &Checked) -> Option<Self> {
        let (violated, rest): (SmallVec<[usize; 4]>, SmallVec<[usize; 4]>) =
            (0..plan.enforced.len()).partition(|&i| !checked.decisions[i].allowed);
        let &first = violated.first()?;
        let plan_only = violated.iter().all(|&i| {
            let p = &plan.enforced[i];
            p.limit.plan.is_some() && p.by_client
        });
        if !plan_only {
            return None;
        }
        let need = violated
            .iter()
            .map(|&i| plan.enforced[i].cost)
            .max()
            .unwrap_or(0);
        Some(Self {
            key: plan.enforced[first].key,
            need,
            violated,
            rest,
        })
    }

    /// The decisions of the request once paid: the refusing limits admit
    /// it with nothing left, the others as they decided (in `rest` order).
    fn paid(&self, checked: &Checked, others: impl IntoIterator<Item = Decision>) -> Checked {
        let mut decisions: Decisions = checked.decisions.clone();
        for &i in &self.violated {
            decisions[i] = Decision {
                allowed: true,
                remaining: 0,
                retry_after: None,
                delay: 0,
                ..decisions[i]
            };
        }
        for (&i, d) in self.rest.iter().zip(others) {
            decisions[i] = d;
        }
        Checked {
            allowed: true,
            decisions,
            ..checked.clone()
        }
    }
}

impl<C: Clock> Engine<C> {
    /// Pays for a refused request with burst credits, when they apply and
    /// suffice: the paid decisions, or `None`. See the module docs.
    pub(super) async fn spend_credits(
        &self,
        plan: &Plan<'_>,
        checked: &Checked,
        gates: &[Gate],
        claim: Claim,
    ) -> Result<Option<Checked>, DecideError> {
        match self
            .runtime
            .spend_credits(claim.key, claim.need, self.credit_wait)
            .await
        {
            Ok(Some(_left)) => {}
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::debug!(error = %e, "burst credits could not be spent");
                return Ok(None);
            }
        }
        let mut others = Vec::new();
        if !claim.rest.is_empty() {
            let rest: SmallVec<[Check<'_>; 4]> = claim
                .rest
                .iter()
                .map(|&i| plan.enforced[i].check(gates[i].reserve))
                .collect();
            let decided = self.store.check(&rest).await;
            let decided = match decided {
                Ok(d) if d.allowed && d.fallback().is_none() => d,
                other => {
                    if let Err(e) = self.runtime.refund_credits(claim.key, claim.need).await {
                        tracing::warn!(error = %e, "burst credits spent on a refused request were not given back");
                    }
                    return other.map(|_| None).map_err(|e| {
                        named(e, plan, |i| {
                            plan.enforced[i].cost.saturating_add(gates[i].reserve)
                        })
                    });
                }
            };
            let share = decided.share;
            others = claim
                .rest
                .iter()
                .zip(decided.decisions)
                .map(|(&i, d)| plan.enforced[i].shown(d, gates[i].reserve, share, true))
                .collect();
        }
        tracing::debug!(spent = claim.need, "burst credits spent");
        Ok(Some(claim.paid(checked, others)))
    }
}
