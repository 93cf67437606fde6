//! Deciding on the shared store (Redis), with the memory store's semantics
//! for gated limits:
//!
//! - **Priority classes** (`max_share`): the class's reserve (the part of
//!   the burst kept for the other classes) goes to Redis with the check
//!   ([`SharedCheck::reserve`]) and is applied in the same atomic script
//!   step as the charge, so the cap is exact across every instance; a
//!   request refused for it is charged nothing.
//! - **Delay limits** (`on_limit = "delay"`): the limit counts on its
//!   extended bucket (`burst + extra`) in Redis too. A request is first
//!   decided with a reserve of `extra`, that is on the plain bucket: what
//!   fits the burst now passes at once. A request refused only by delay
//!   limits then takes a place in this instance's
//!   [delay queue](crate::delay_queue) for each and is decided again, on
//!   the whole extended bucket: if admitted, it has reserved its slot and
//!   is held for the time the rate needs to bring the bucket back within
//!   its burst (an async sleep in the server). When a queue is full, the
//!   first refusal stands (with the time until a place frees as its retry
//!   time, if sooner). A refusal is charged nothing. The queue bound is per
//!   instance. A request over the burst costs two round trips (the first
//!   one is often answered by the over-limit cache).
//!
//! A class with a reserve is never held on a delay limit (it must fit the
//! burst less its reserve), as on the memory store.
//!
//! The over-limit cache keeps these apart by their reserve; the local
//! fallback applies the same reserves to its share of each limit (see
//! [`sluice_redis::local`]), and its decisions are read with its bucket
//! sizes.

use sluice_core::{Decision, LimitSpec, Nanos};
use sluice_redis::shared::share_of;
use sluice_redis::{DecidedBy, Fallback, SharedCheck, SharedStore};
use sluice_store::Checked;
use smallvec::SmallVec;

use super::{Claim, Compiled, DecideError, Engine, Plan, Planned, Policy, RequestInfo, Verdict};
use crate::delay_queue::Ticket;
use sluice_core::Clock;

/// How one enforced limit of a request is decided on the shared store.
#[derive(Debug, Default)]
struct Gate {
    /// The cost that must be left after the charge.
    reserve: u64,
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

/// Whose bucket sizes a decision is in.
#[derive(Debug, Clone, Copy)]
enum View {
    /// Redis's: the limits as configured.
    Global,
    /// The local fallback's share of each limit, for this many instances.
    Local(u32),
}

impl View {
    fn of(by: DecidedBy, instances: u32) -> Self {
        match by {
            DecidedBy::Fallback(Fallback::Local) => Self::Local(instances),
            _ => Self::Global,
        }
    }

    /// A limit's plain definition as this view sizes it.
    fn plain(self, spec: &LimitSpec) -> LimitSpec {
        match self {
            Self::Global => *spec,
            Self::Local(n) => share_of(spec, n),
        }
    }
}

impl<'p> Planned<'p> {
    /// The check of this limit on the shared store: on the bucket it counts
    /// on, keeping `reserve`.
    fn shared_check(&self, reserve: u64) -> SharedCheck<'p> {
        let (spec, limiter) = self.limit.counter();
        SharedCheck {
            limit_id: &self.limit.id,
            spec,
            limiter,
            key: self.key,
            cost: self.cost,
            reserve,
        }
    }

    /// A shared-store decision, made with `reserve`, as the client sees it
    /// (as [`Planned::translate`] does on the memory store): the burst as
    /// the limit, `remaining` what the request's class may still use now
    /// without waiting, and (`hold`: an enforced, admitted request) the
    /// wait for its slot as the delay.
    fn shown(&self, d: Decision, reserve: u64, view: View, hold: bool) -> Decision {
        if self.limit.delay.is_none() {
            // Redis counted `remaining` above the class's reserve already.
            return d;
        }
        let plain = view.plain(&self.limit.spec);
        if reserve > 0 {
            // Decided as the plain bucket (less any class reserve): never
            // held, and `remaining` is already above the reserve.
            return Decision {
                limit: plain.burst,
                ..d
            };
        }
        // Decided on the whole extended bucket.
        self.translate_on(d, &plain, hold)
    }
}

impl<C: Clock> Engine<C> {
    /// [`Engine::decide`] on the shared store. See the module docs.
    pub(super) async fn decide_shared(
        &self,
        shared: &SharedStore,
        req: &RequestInfo<'_>,
    ) -> Result<Verdict, DecideError> {
        let path = crate::path::canonical(req.path)?;
        let req = &RequestInfo {
            path: &path,
            ..*req
        };
        let current = self.current.load_full();
        let runtime = self
            .runtime_plans
            .in_force()
            .map(arc_swap::Guard::into_inner);
        let mut plan = Plan::new(current.policy.headers);
        self.plan(&current, runtime.as_deref(), req, &mut plan)?;
        let now = self.store.clock().now();
        let mut gates: SmallVec<[Gate; 4]> = plan
            .enforced
            .iter()
            .map(|p| Gate::first(p, plan.class))
            .collect();
        let (mut checked, mut fallback) = self.decide_round(shared, &plan, &gates).await;
        if !checked.allowed && self.take_places(&current, &plan, &mut gates, &mut checked, now) {
            (checked, fallback) = self.decide_round(shared, &plan, &gates).await;
        }
        if !checked.allowed
            && fallback.is_none()
            && let Some(paid) = self
                .spend_credits_shared(shared, &current.policy, &plan, &checked, &gates)
                .await
        {
            checked = paid;
        }
        if checked.allowed {
            let wait = checked.decisions.iter().map(|d| d.delay).max().unwrap_or(0);
            if wait > 0 {
                // Held from now, after the round trips.
                let release = self.store.clock().now().saturating_add(wait);
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
        let mut shadow = Vec::new();
        if checked.allowed && !plan.shadowed.is_empty() {
            // Each shadowed limit on its own, all in one round trip.
            let checks: SmallVec<[SharedCheck<'_>; 4]> =
                plan.shadowed.iter().map(|p| p.shared_check(0)).collect();
            let each = shared.check_each(&checks).await;
            for (p, one) in plan.shadowed.iter().zip(each) {
                let view = View::of(one.by, shared.options().expected_instances);
                let decision = one
                    .checked
                    .decisions
                    .first()
                    .map(|d| p.shown(*d, 0, view, false))
                    .unwrap_or_else(|| p.impossible());
                shadow.push(p.result(decision));
            }
        }
        Ok(plan.verdict(checked, shadow, fallback))
    }

    /// One decision of every enforced limit on the shared store, with the
    /// gates' reserves, as the client sees it; and the fallback that made
    /// it, if any.
    async fn decide_round(
        &self,
        shared: &SharedStore,
        plan: &Plan<'_>,
        gates: &[Gate],
    ) -> (Checked, Option<Fallback>) {
        let checks: SmallVec<[SharedCheck<'_>; 4]> = plan
            .enforced
            .iter()
            .zip(gates)
            .map(|(p, g)| p.shared_check(g.reserve))
            .collect();
        let decided = shared.check(&checks).await;
        let fallback = match decided.by {
            DecidedBy::Fallback(f) => Some(f),
            DecidedBy::Store | DecidedBy::Cache => None,
        };
        let view = View::of(decided.by, shared.options().expected_instances);
        let mut checked = decided.checked;
        for ((p, g), d) in plan
            .enforced
            .iter()
            .zip(gates)
            .zip(checked.decisions.iter_mut())
        {
            *d = p.shown(*d, g.reserve, view, true);
        }
        (checked, fallback)
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
        now: Nanos,
    ) -> bool {
        let holdable = |i: usize| {
            let p = &plan.enforced[i];
            p.limit.delay.is_some() && p.limit.reserve_for(plan.class) == 0
        };
        let refused = |i: usize| !checked.decisions[i].allowed;
        if !(0..plan.enforced.len()).all(|i| !refused(i) || holdable(i)) {
            return false;
        }
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

    /// [`spend_credits`](Self::spend_credits) on the shared store: the
    /// credits are debited in Redis first, atomically across instances (one
    /// round trip, only for a key that this instance's mirror says has
    /// enough), then the other limits are checked (with their reserves, as
    /// decided before); if they refuse, the credits are given back.
    async fn spend_credits_shared(
        &self,
        shared: &SharedStore,
        policy: &Policy,
        plan: &Plan<'_>,
        checked: &Checked,
        gates: &[Gate],
    ) -> Option<Checked> {
        let state = self.runtime_state.as_ref()?;
        let claim = Claim::of(policy, plan, checked)?;
        if self.credits_here(claim.key) < claim.need {
            return None;
        }
        let timeout = shared.options().timeout;
        match state.spend_credits(claim.key, claim.need, timeout).await {
            Ok(Some(left)) => self.mirror_credits(claim.key, left),
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "burst credits could not be spent");
                return None;
            }
        }
        let mut others = Vec::new();
        if !claim.rest.is_empty() {
            let rest: SmallVec<[SharedCheck<'_>; 4]> = claim
                .rest
                .iter()
                .map(|&i| plan.enforced[i].shared_check(gates[i].reserve))
                .collect();
            let decided = shared.check(&rest).await;
            if !decided.checked.allowed || matches!(decided.by, DecidedBy::Fallback(_)) {
                if let Err(e) = state.refund_credits(claim.key, claim.need).await {
                    tracing::warn!(error = %e, "burst credits spent on a refused request were not given back");
                }
                return None;
            }
            others = claim
                .rest
                .iter()
                .zip(decided.checked.decisions)
                .map(|(&i, d)| plan.enforced[i].shown(d, gates[i].reserve, View::Global, true))
                .collect();
        }
        tracing::debug!(spent = claim.need, "burst credits spent");
        Some(claim.paid(checked, others))
    }
}
