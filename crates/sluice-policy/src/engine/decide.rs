//! The one decision path, whatever the store:
//!
//! - **Priority classes** (`max_share`): the class's reserve (the part of
//!   the burst kept for the other classes) goes to the store with the check
//!   ([`Check::reserve`]) and is applied in the same atomic step as the
//!   charge, so the cap is exact (across every instance, on a shared
//!   store); a request refused for it is charged nothing.
//! - **Delay limits** (`on_limit = "delay"`): the limit counts on its
//!   extended bucket (`burst + extra`). A request is first decided with a
//!   reserve of `extra`, that is on the plain bucket: what fits the burst
//!   now passes at once. A request refused only by delay limits then takes
//!   a place in this instance's [delay queue](crate::delay_queue) for each
//!   and is decided again, on the whole extended bucket: if admitted, it
//!   has reserved its slot and is held for the time the rate needs to bring
//!   the bucket back within its burst (the server sleeps). When a queue is
//!   full, the first refusal stands (with the time until a place frees as
//!   its retry time, if sooner). A refusal is charged nothing. The queue
//!   bound is per instance.
//! - **Burst credits** pay for a request refused only by its plan's limits
//!   ([`credits`](super::credits)).
//! - **Shadowed limits** count only requests that pass, each on its own,
//!   and never refuse.
//!
//! A class with a reserve is never held on a delay limit (it must fit the
//! burst less its reserve).

use sluice_core::{Clock, Nanos};
use sluice_store::seam::{Check, Checked, Fallback, now_or_never};
use smallvec::SmallVec;

use super::Engine;
use super::credits::Claim;
use super::plan::Plan;
use super::verdict::{DecideError, LimitResult, Shadow, Verdict};
use crate::delay_queue::Ticket;

/// How one enforced limit of a request is decided after a first round
/// that did not settle.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// The cost that must be left after the charge.
    pub(super) reserve: u64,
    /// The place taken in the delay queue, when the request may be held.
    ticket: Option<Ticket>,
    /// With the delay queue full: the time until a held request leaves it.
    slot: Option<Nanos>,
}

/// The gates of a request's later steps: one per enforced limit.
pub(super) type Gates = SmallVec<[Gate; 4]>;

/// The gates of a plan's first round: its checks' reserves.
fn first_gates(plan: &Plan<'_>) -> Gates {
    plan.checks
        .iter()
        .map(|c| Gate {
            reserve: c.reserve,
            ..Gate::default()
        })
        .collect()
}

/// The checks of a later round: every enforced limit, with its gate's
/// reserve.
fn round_checks<'c>(plan: &Plan<'c>, gates: &[Gate]) -> SmallVec<[Check<'c>; 4]> {
    plan.checks
        .iter()
        .zip(gates)
        .map(|(c, g)| Check {
            reserve: g.reserve,
            ..*c
        })
        .collect()
}

/// A round's answer from the store, as the client sees it: `checks` are
/// what was asked.
#[inline]
fn after_round(
    plan: &Plan<'_>,
    checks: &[Check<'_>],
    answer: Result<Checked, sluice_store::seam::StoreError>,
) -> Result<Checked, DecideError> {
    let mut checked = answer.map_err(|e| impossible(e, plan, checks))?;
    shown(plan, checks, &mut checked);
    Ok(checked)
}

/// The store's decisions, as the client sees them (see [`Planned::shown`]).
#[inline]
fn shown(plan: &Plan<'_>, checks: &[Check<'_>], checked: &mut Checked) {
    let share = checked.share;
    for ((p, c), d) in plan
        .enforced
        .iter()
        .zip(checks)
        .zip(checked.decisions.iter_mut())
    {
        *d = p.shown(*d, c.reserve, share, true);
    }
}

/// A store's refusal of checks it can never admit, with the limit named.
#[cold]
fn impossible(
    e: sluice_store::seam::StoreError,
    plan: &Plan<'_>,
    checks: &[Check<'_>],
) -> DecideError {
    named(e, plan, |i| {
        checks[i].cost.saturating_add(checks[i].reserve)
    })
}

/// Whether a first round's answer is the end of the decision: nothing to
/// hold, no credits to spend, no shadowed limits to record. The usual
/// request stops here, on either driver.
#[inline]
fn settled(plan: &Plan<'_>, checked: &Checked) -> bool {
    if checked.allowed {
        // Admitted at once: no place in a delay queue was taken, so there
        // is no hold to release (a leaky bucket's own delay is in the
        // decision already).
        plan.shadowed.is_empty()
    } else {
        // No delay limit to hold it (whoever decided), and no refusing
        // plan limit for credits to pay (credits are not spent on a
        // fallback's refusal).
        let by_fallback = checked.fallback().is_some();
        plan.enforced
            .iter()
            .zip(&checked.decisions)
            .all(|(p, d)| stands(p, d, by_fallback))
    }
}

/// Whether a refused request's decision under one enforced limit is the
/// end of it: no delay limit to hold it, and no refusing plan limit for
/// burst credits to pay (credits are not spent on a fallback's refusal).
#[inline]
fn stands(p: &super::plan::Planned<'_>, d: &sluice_core::Decision, by_fallback: bool) -> bool {
    p.limit.delay.is_none() && (d.allowed || by_fallback || p.limit.plan.is_none())
}

impl<C: Clock> Engine<C> {
    /// Decides a planned request (see the module docs), waiting on the
    /// store as long as it takes: the first round, then [`Self::rest`]
    /// unless it [settled].
    pub(super) async fn decide_plan(&self, plan: &Plan<'_>) -> Result<Verdict, DecideError> {
        let answer = self.store.check(&plan.checks).await;
        let checked = after_round(plan, &plan.checks, answer)?;
        if settled(plan, &checked) {
            return Ok(plan.verdict(checked, Shadow::default()));
        }
        // The steps a request rarely needs wait in a box of their own: the
        // future of the usual request stays small.
        Box::pin(self.rest(plan, checked)).await
    }

    /// [`Self::decide_plan`] on a store that answers at once, without a
    /// future on the usual path: the same steps, the first round's answer
    /// taken as it comes. `None` if the store did not answer at once.
    #[inline(always)]
    pub(super) fn decide_plan_now(&self, plan: &Plan<'_>) -> Option<Result<Verdict, DecideError>> {
        if let ([check], [p], []) = (&plan.checks[..], &plan.enforced[..], &plan.shadowed[..])
            && let Some(answer) = self.store.check_one_now(check)
        {
            // One limit, the usual request: its one decision, with no
            // group around it.
            let d = match answer {
                Ok(d) => p.shown(d, check.reserve, 1, true),
                Err(e) => return Some(Err(impossible(e, plan, &plan.checks))),
            };
            // As `settled`, for one limit decided by the store itself.
            if d.allowed || stands(p, &d, false) {
                return Some(Ok(Verdict::one(plan.style, p.result(d))));
            }
            // Refused, and a delay or credits may yet admit it: the rest
            // of the path, from this first round.
            let checked = Checked::by_store(false, smallvec::smallvec![d]);
            return now_or_never(self.rest(plan, checked));
        }
        let mut pending = self.store.check(&plan.checks);
        // Read in place: the answer is not moved on the usual path.
        let checked = match pending.ready_mut()? {
            Ok(c) => c,
            Err(e) => return Some(Err(impossible(e.clone(), plan, &plan.checks))),
        };
        shown(plan, &plan.checks, checked);
        if settled(plan, checked) {
            return Some(Ok(plan.verdict_of(checked, Shadow::default())));
        }
        let checked = now_or_never(pending)?.ok()?;
        now_or_never(self.rest(plan, checked))
    }

    /// What follows a first round that did not settle: a second round for
    /// a request a delay limit may hold, burst credits for one refused by
    /// its plan, the hold's release time, and the shadowed limits of an
    /// admitted request.
    async fn rest(&self, plan: &Plan<'_>, mut checked: Checked) -> Result<Verdict, DecideError> {
        let mut gates = first_gates(plan);
        if !checked.allowed && self.take_places(plan, &mut gates, &mut checked) {
            let checks = round_checks(plan, &gates);
            let answer = self.store.check(&checks).await;
            checked = after_round(plan, &checks, answer)?;
        }
        if !checked.allowed
            && checked.fallback().is_none()
            && let Some(claim) = Claim::of(plan, &checked)
            && let Some(paid) = self.spend_credits(plan, &checked, &gates, claim).await?
        {
            checked = paid;
        }
        if checked.allowed {
            let wait = checked.decisions.iter().map(|d| d.delay).max().unwrap_or(0);
            if wait > 0 {
                // Held from now, after any round trips.
                let release = self.clock.now().saturating_add(wait);
                for (g, d) in gates.iter_mut().zip(&checked.decisions) {
                    if d.delay > 0
                        && let Some(ticket) = g.ticket.take()
                    {
                        ticket.hold_until(release);
                    }
                }
            }
        }
        // The other places taken are given back.
        drop(gates);
        let (shadow, shadow_fallback) = if checked.allowed && !plan.shadowed.is_empty() {
            self.decide_shadowed(plan).await
        } else {
            (Vec::new(), None)
        };
        let would_have_limited = shadow
            .iter()
            .zip(&plan.shadowed)
            .filter(|(r, p)| p.logged && !r.decision.allowed);
        for (r, _) in would_have_limited {
            // Clients cause these lines: a budget keeps them from drowning
            // the log (the metrics count every one).
            if let Some(left_out) = self.shadow_lines.take() {
                tracing::info!(limit = %r.name(), left_out, "shadow: would have been limited");
            }
        }
        let mut verdict = plan.verdict(checked, shadow.into());
        if plan.enforced.is_empty() {
            // Nothing was decided all or nothing (an adapter's limits each
            // on its own): who decided is who decided the shadowed ones.
            verdict.fallback = verdict.fallback.or(shadow_fallback);
        }
        Ok(verdict)
    }

    /// The shadowed limits of an admitted request, each on its own, and
    /// the fallback that decided them, if one did.
    async fn decide_shadowed(&self, plan: &Plan<'_>) -> (Vec<LimitResult>, Option<Fallback>) {
        let checks: SmallVec<[Check<'_>; 4]> = plan.shadowed.iter().map(|p| p.check(0)).collect();
        let each = self.store.check_each(&checks).await;
        let mut fallback = None;
        let results = plan
            .shadowed
            .iter()
            .zip(each)
            .map(|(p, one)| {
                let decision = one
                    .ok()
                    .and_then(|c| {
                        fallback = fallback.or(c.fallback());
                        c.decisions.first().map(|d| p.shown(*d, 0, c.share, false))
                    })
                    .unwrap_or_else(|| p.impossible());
                p.result(decision)
            })
            .collect();
        (results, fallback)
    }

    /// After a first refusal: when only delay limits refused it (limits
    /// whose class may be held), takes a place in the delay queue of each
    /// delay limit for a second decision on the extended buckets, and says
    /// so. When a refusing limit's queue is full, takes none, and its
    /// refusal's retry time becomes the time until a place frees, if
    /// sooner.
    fn take_places(&self, plan: &Plan<'_>, gates: &mut [Gate], checked: &mut Checked) -> bool {
        let holdable = |i: usize| {
            let p = &plan.enforced[i];
            p.limit.delay.is_some() && p.limit.reserve_for(plan.class) == 0
        };
        let refused = |i: usize| !checked.decisions[i].allowed;
        if !(0..plan.enforced.len()).all(|i| !refused(i) || holdable(i)) {
            return false;
        }
        let now = self.clock.now();
        // Places are taken here and given to the gates only if every queue
        // that must hold this request has room: otherwise they are given
        // back (dropped) and every gate keeps its first decision's reserve.
        let mut taken: SmallVec<[(usize, Ticket); 4]> = SmallVec::new();
        let mut full = false;
        for (i, (p, g)) in plan.enforced.iter().zip(gates.iter_mut()).enumerate() {
            let (Some(d), Some(queue)) = (p.limit.delay, p.gate) else {
                continue;
            };
            if !holdable(i) {
                continue;
            }
            match queue.enter(now, d.max_queue) {
                Ok(ticket) => taken.push((i, ticket)),
                Err(slot) if refused(i) => {
                    full = true;
                    g.slot = Some(slot);
                }
                Err(_) => {}
            }
        }
        if full {
            drop(taken);
            for (g, d) in gates.iter().zip(checked.decisions.iter_mut()) {
                if let Some(slot) = g.slot.filter(|s| *s > 0)
                    && !d.allowed
                {
                    d.retry_after = d.retry_after.map(|r| r.min(slot).max(1));
                }
            }
            tracing::debug!("delay queue full: refused");
            return false;
        }
        let held = !taken.is_empty();
        for (i, ticket) in taken {
            gates[i].reserve = 0;
            gates[i].ticket = Some(ticket);
        }
        held
    }
}

/// A store's refusal of an impossible check, with the limit named: the
/// first enforced limit whose asked cost (with its reserve) exceeds its
/// bucket.
pub(super) fn named(
    e: sluice_store::seam::StoreError,
    plan: &Plan<'_>,
    asked: impl Fn(usize) -> u64,
) -> DecideError {
    let limits = plan.enforced.iter().enumerate();
    DecideError::from_store(e, limits.map(|(i, p)| (p.limit, asked(i))))
}
