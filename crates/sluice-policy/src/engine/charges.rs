//! Limits an adapter matched itself (the Envoy service, from descriptors),
//! decided on the engine's one path: all or nothing, shadow, impossible
//! costs and the store's fallback exactly as for an HTTP request.

use sluice_core::Clock;
use sluice_store::KeyId;
use sluice_store::seam::{Check, Counter, LeaseId};
use smallvec::SmallVec;

use super::Engine;
use super::plan::{Plan, Planned};
use super::verdict::{DecideError, LimitResult, Results, Verdict};
use crate::limit::Limit;

/// One limit to decide for a request whose limits an adapter matched: the
/// compiled limit, its counter (registered with the engine's store), the
/// client's key id and the cost.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// Its counter in the engine's [store](Engine::store).
    pub counter: &'a Counter,
    /// The keyed hash of what the limit counts by (from
    /// [`Engine::hasher`]).
    pub key: KeyId,
    /// The cost under this limit.
    pub cost: u64,
    /// How it counts.
    pub counting: Counting,
    /// On a concurrency limit, the lease its slots are taken, renewed or
    /// released under (see [`LeaseId`]): for an adapter that may never see
    /// the release (Envoy). `None`: held by this instance.
    pub lease: Option<LeaseId>,
}

/// How a [`Charge`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counting {
    /// Decided with the request's other enforced charges, all or nothing.
    Enforced,
    /// Shadow mode: decided on its own once the request is admitted,
    /// never refusing and never shown to the client. A refusal it would
    /// have made is logged (a budget keeps the lines few).
    Shadow,
    /// Decided on its own once the request is admitted, never refusing
    /// here: the adapter reads its decision and answers from it (every
    /// descriptor with Envoy's `compat`). Nothing is logged: its refusals
    /// are real ones.
    OnItsOwn,
    /// Envoy's quota mode: decided on its own once the request is
    /// admitted, as [`OnItsOwn`](Self::OnItsOwn). When every quota charge
    /// of a request is refused, the request is refused, and what its
    /// other charges took is given back: a refused request consumes
    /// nothing.
    Quota,
}

impl Charge<'_> {
    /// Whether it is decided with the enforced charges.
    fn enforced(&self) -> bool {
        self.counting == Counting::Enforced
    }
}

impl<C: Clock> Engine<C> {
    /// Decides limits an adapter matched itself, together: the enforced
    /// ones all or nothing, the shadowed ones each on its own once the
    /// request is admitted. The verdict's results are the enforced
    /// charges' in order, its shadow results the shadowed ones'.
    ///
    /// A request that can never pass (an enforced counter and key asked for
    /// more than its burst, by one charge or by several on the same counter
    /// and key) is refused and charges nothing: its verdict shows every
    /// enforced limit's state, peeked in one round, with the impossible
    /// ones refused (no retry time: waiting does not help), and no shadow
    /// results.
    pub async fn decide_charges(&self, charges: &[Charge<'_>]) -> Result<Verdict, DecideError> {
        let style = self.current.load().policy.headers;
        let impossible = impossible(charges);
        let mut plan = Plan::new(style);
        for c in charges {
            if !impossible.is_empty() && !c.enforced() {
                continue;
            }
            let planned = Planned {
                limit: c.limit,
                counter: c.counter,
                gate: None,
                by_client: false,
                key: c.key,
                // A request that cannot pass only peeks.
                cost: if impossible.is_empty() { c.cost } else { 0 },
                logged: c.counting == Counting::Shadow,
                lease: c.lease,
            };
            plan.place(planned, c.enforced())?;
        }
        plan.seal(None)?;
        let mut verdict = self.decide_plan(&plan).await?;
        if verdict.allowed && every_quota_refused(charges, &verdict) {
            self.refuse_for_quotas(charges, &mut verdict).await?;
        }
        if !impossible.is_empty() {
            verdict.allowed = false;
            for &i in &impossible {
                if let Some(r) = verdict.results.get_mut(i) {
                    r.decision.allowed = false;
                    r.decision.retry_after = None;
                }
            }
        }
        Ok(verdict)
    }
}

impl<C: Clock> Engine<C> {
    /// Refuses an admitted request whose every quota charge was refused:
    /// what its enforced charges, and its other charges decided on their
    /// own, took is given back, and their results show their state after.
    async fn refuse_for_quotas(
        &self,
        charges: &[Charge<'_>],
        verdict: &mut Verdict,
    ) -> Result<(), DecideError> {
        let (enforced, own): (SmallVec<[&Charge<'_>; 4]>, SmallVec<[&Charge<'_>; 4]>) =
            charges.iter().partition(|c| c.enforced());
        // What was charged: every enforced charge (the request was
        // admitted), and each other one admitted but the quotas (refused).
        let mut back: SmallVec<[Charge<'_>; 4]> = SmallVec::new();
        let mut places: SmallVec<[(bool, usize); 4]> = SmallVec::new();
        for (i, c) in enforced.iter().enumerate() {
            back.push(**c);
            places.push((true, i));
        }
        for (i, (c, r)) in own.iter().zip(&verdict.shadow).enumerate() {
            if r.decision.allowed && c.counting != Counting::Quota {
                back.push(**c);
                places.push((false, i));
            }
        }
        let given = self.refund(&back).await?;
        // The refund may have gone to the fallback while the store decided
        // the charges: the answer says a fallback took part.
        verdict.fallback = verdict.fallback.or(given.fallback);
        for ((enforced, i), after) in places.into_iter().zip(given.results.iter()) {
            let results = if enforced {
                &mut verdict.results[..]
            } else {
                &mut verdict.shadow[..]
            };
            if let Some(r) = results.get_mut(i) {
                r.decision = after.decision;
            }
        }
        verdict.allowed = false;
        Ok(())
    }

    /// Gives quota back to limits an adapter matched: each charge's cost
    /// returns to its counter and key, never past full (a cost settled
    /// after the response; Envoy's `is_negative_hits`). A refund is never
    /// refused: the verdict is allowed, and its results are each limit's
    /// state afterwards, in the order of `refunds`. Shadowed charges are
    /// given back alike, since they were counted alike.
    ///
    /// On a shared store that cannot be reached, the refund goes to the
    /// local fallback's share, and the verdict says so (`fallback`).
    pub async fn refund(&self, refunds: &[Charge<'_>]) -> Result<Verdict, DecideError> {
        let style = self.current.load().policy.headers;
        let checks: SmallVec<[Check<'_>; 4]> = refunds
            .iter()
            .map(|c| Check {
                counter: c.counter,
                key: c.key,
                cost: c.cost,
                reserve: 0,
                lease: c.lease,
            })
            .collect();
        let checked = self.store.refund(&checks).await?;
        let mut results = Results::new();
        for (c, d) in refunds.iter().zip(&checked.decisions) {
            results.push(LimitResult::of(c.limit, c.key, *d));
        }
        Ok(Verdict {
            allowed: true,
            fallback: checked.fallback(),
            results,
            shadow: Default::default(),
            style,
        })
    }
}

impl<C: Clock> Engine<C> {
    /// Charges costs known only after the request (Envoy's stream-done
    /// descriptors): each charge's cost on its counter and key, whatever
    /// is left, each on its own, never refused. Past empty it is debt, up
    /// to the limit's `settle` rule's `max_debt` (one burst for a limit
    /// without one); beyond, [excess](sluice_core::Debited::excess),
    /// reported, not charged. One answer per charge, in order.
    pub async fn debit(
        &self,
        debits: &[Charge<'_>],
    ) -> Vec<Result<sluice_core::Debited, DecideError>> {
        let mut out = Vec::with_capacity(debits.len());
        for c in debits {
            let max_debt = c
                .limit
                .settle
                .as_ref()
                .map_or(c.limit.spec.burst, |s| s.max_debt);
            let debited = self.store.debit(c.counter, c.key, c.cost, max_debt).await;
            out.push(debited.map_err(DecideError::from));
        }
        out
    }
}

/// Whether a request has quota charges and every one was refused. The
/// verdict's shadow results are its charges decided on their own, in
/// order.
fn every_quota_refused(charges: &[Charge<'_>], verdict: &Verdict) -> bool {
    let mut quotas = charges
        .iter()
        .filter(|c| !c.enforced())
        .zip(&verdict.shadow)
        .filter(|(c, _)| c.counting == Counting::Quota)
        .peekable();
    quotas.peek().is_some() && quotas.all(|(_, r)| !r.decision.allowed)
}

/// The enforced charges (by their place among the enforced ones) whose
/// counter and key are asked for more than the counter's burst, by them
/// alone or with other charges on the same counter and key.
fn impossible(charges: &[Charge<'_>]) -> SmallVec<[usize; 4]> {
    let enforced: SmallVec<[&Charge<'_>; 4]> = charges.iter().filter(|c| c.enforced()).collect();
    let asked = |c: &Charge<'_>| {
        enforced
            .iter()
            .filter(|o| std::ptr::eq(o.counter, c.counter) && o.key == c.key)
            .fold(0u64, |sum, o| sum.saturating_add(o.cost))
    };
    enforced
        .iter()
        .enumerate()
        .filter(|(_, c)| asked(c) > c.counter.def().spec().burst)
        .map(|(i, _)| i)
        .collect()
}
