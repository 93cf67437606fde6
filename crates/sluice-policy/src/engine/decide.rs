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
use sluice_store::seam::{Check, Checked};
use smallvec::SmallVec;

use super::Engine;
use super::compiled::Compiled;
use super::credits::Claim;
use super::plan::{Plan, Planned};
use super::verdict::{DecideError, LimitResult, Verdict};
use crate::delay_queue::Ticket;

/// How one enforced limit of a request is decided.
#[derive(Debug, Default)]
pub(super) struct Gate {
    /// The cost that must be left after the charge.
    pub(super) reserve: u64,
    /// The place taken in the delay queue, when the request may be held.
    ticket: Option<Ticket>,
    /// With the delay queue full: the time until a held request leaves it.
    slot: Option<Nanos>,
}

impl Gate {
    /// The first decision's gate: the class's reserve, and on a delay
    /// limit its extension (the plain bucket).
    fn first(p: &Planned<'_>, class: Option<&str>) -> Self {
        let extra = p.limit.delay.map_or(0, |d| d.extra);
        Self {
            reserve: p.limit.reserve_for(class).saturating_add(extra),
            ..Self::default()
        }
    }
}

impl<C: Clock> Engine<C> {
    /// Decides a planned request. See the module docs.
    pub(super) async fn decide_plan(
        &self,
        current: &Compiled,
        plan: &Plan<'_>,
    ) -> Result<Verdict, DecideError> {
        let mut gates: SmallVec<[Gate; 4]> = plan
            .enforced
            .iter()
            .map(|p| Gate::first(p, plan.class))
            .collect();
        // The steps a request rarely needs (a second round for a delay,
        // credits, shadowed limits) wait in a box of their own: the future
        // of the usual request stays small, and is not copied around whole.
        let mut checked = self.decide_round(current, plan, &gates).await?;
        if !checked.allowed && self.take_places(current, plan, &mut gates, &mut checked) {
            checked = Box::pin(self.decide_round(current, plan, &gates)).await?;
        }
        if !checked.allowed
            && checked.fallback().is_none()
            && let Some(claim) = Claim::of(&current.policy, plan, &checked)
            && let Some(paid) =
                Box::pin(self.spend_credits(current, plan, &checked, &gates, claim)).await?
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
        let shadow = if checked.allowed && !plan.shadowed.is_empty() {
            Box::pin(self.decide_shadowed(current, plan)).await
        } else {
            Vec::new()
        };
        Ok(plan.verdict(checked, shadow))
    }

    /// One decision of every enforced limit, with the gates' reserves, as
    /// the client sees it.
    pub(super) async fn decide_round(
        &self,
        current: &Compiled,
        plan: &Plan<'_>,
        gates: &[Gate],
    ) -> Result<Checked, DecideError> {
        let checks: SmallVec<[Check<'_>; 4]> = plan
            .enforced
            .iter()
            .zip(gates)
            .map(|(p, g)| p.check(current, g.reserve))
            .collect();
        let mut checked = self.store.check(&checks).await.map_err(|e| {
            named(e, plan, |i| {
                checks[i].cost.saturating_add(checks[i].reserve)
            })
        })?;
        for ((p, g), d) in plan
            .enforced
            .iter()
            .zip(gates)
            .zip(checked.decisions.iter_mut())
        {
            *d = p.shown(*d, g.reserve, checked.share, true);
        }
        Ok(checked)
    }

    /// The shadowed limits of an admitted request, each on its own.
    async fn decide_shadowed(&self, current: &Compiled, plan: &Plan<'_>) -> Vec<LimitResult> {
        let checks: SmallVec<[Check<'_>; 4]> =
            plan.shadowed.iter().map(|p| p.check(current, 0)).collect();
        let each = self.store.check_each(&checks).await;
        plan.shadowed
            .iter()
            .zip(each)
            .map(|(p, one)| {
                let decision = one
                    .ok()
                    .and_then(|c| c.decisions.first().map(|d| p.shown(*d, 0, c.share, false)))
                    .unwrap_or_else(|| p.impossible());
                p.result(decision)
            })
            .collect()
    }

    /// After a first refusal: when only delay limits refused it (limits
    /// whose class may be held), takes a place in the delay queue of each
    /// delay limit for a second decision on the extended buckets, and says
    /// so. When a refusing limit's queue is full, takes none, and its
    /// refusal's retry time becomes the time until a place frees, if
    /// sooner.
    fn take_places(
        &self,
        current: &Compiled,
        plan: &Plan<'_>,
        gates: &mut [Gate],
        checked: &mut Checked,
    ) -> bool {
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
            let (Some(d), Some(queue)) = (p.limit.delay, &current.gates[p.index]) else {
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
    let mut err = DecideError::from(e);
    if let DecideError::Impossible { limit, .. } = &mut err
        && limit.is_empty()
        && let Some((_, p)) = plan
            .enforced
            .iter()
            .enumerate()
            .find(|(i, p)| asked(*i) > p.limit.counter().spec().burst)
    {
        *limit = p.limit.name.to_string();
    }
    err
}
