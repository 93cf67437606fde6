//! Which limits apply to a request, under which keys, enforced or in
//! shadow: the plan the engine then decides.

use sluice_core::{Decision, LimitSpec};
use sluice_store::KeyId;
use std::sync::Arc;

use sluice_store::seam::{Check, Checked, Counter, LeaseId};
use smallvec::SmallVec;

use super::Engine;
use super::compiled::Compiled;
use super::verdict::{DecideError, LimitResult, Results, Shadow, Verdict};
use crate::config::HeadersConfig;
use crate::delay_queue::DelayQueue;
use crate::limit::Limit;
use crate::policy::{Access, RequestInfo};
use crate::runtime::RuntimePlans;
use sluice_core::Clock;

/// One applied limit, planned.
pub(super) struct Planned<'p> {
    pub(super) limit: &'p Limit,
    /// The limit's counter in the store.
    pub(super) counter: &'p Counter,
    /// A delay limit's queue on this instance.
    pub(super) gate: Option<&'p Arc<DelayQueue>>,
    /// Whether the limit counts by the client key: a plan's limit that
    /// burst credits may pay for.
    pub(super) by_client: bool,
    pub(super) key: KeyId,
    pub(super) cost: u64,
    /// For a shadowed limit: whether a refusal it would have made is
    /// logged (shadow mode, rollout; not an adapter's limit decided on its
    /// own, whose refusals are real).
    pub(super) logged: bool,
    /// A concurrency limit's lease (see [`Check::lease`]).
    pub(super) lease: Option<LeaseId>,
}

impl<'p> Planned<'p> {
    /// The check of this limit on the store: on the bucket it counts on,
    /// keeping `reserve`.
    pub(super) fn check(&self, reserve: u64) -> Check<'p> {
        Check {
            counter: self.counter,
            key: self.key,
            cost: self.cost,
            reserve,
            lease: self.lease,
        }
    }

    #[inline]
    pub(super) fn result(&self, decision: Decision) -> LimitResult {
        LimitResult::of(self.limit, self.key, decision)
    }

    /// A decision on a delay limit's extended bucket, as the client sees
    /// it, for an extended bucket whose plain part is `plain` (the limit
    /// itself, or the local fallback's share of it): its burst as the
    /// limit, the extension not counted in `remaining`, and (`hold`: for an
    /// enforced, admitted request) the time until the bucket is back within
    /// its burst as the delay.
    pub(super) fn translate_on(&self, d: Decision, plain: &LimitSpec, hold: bool) -> Decision {
        let Some(delay) = self.limit.delay else {
            return d;
        };
        let extra = d.limit.saturating_sub(plain.burst);
        let mut out = Decision {
            limit: plain.burst,
            remaining: d.remaining.saturating_sub(extra),
            ..d
        };
        let used = d.limit.saturating_sub(d.remaining);
        if d.allowed && hold && used > plain.burst {
            out.delay = plain
                .rate
                .refill_time(used - plain.burst)
                .min(delay.max_delay);
        }
        out
    }

    /// A store's decision, made with `reserve` on `1/share` of the limit,
    /// as the client sees it: the burst as the limit, `remaining` what the
    /// request's class may still use now without waiting, and (`hold`: an
    /// enforced, admitted request) the wait for its slot as the delay.
    #[inline]
    pub(super) fn shown(&self, d: Decision, reserve: u64, share: u32, hold: bool) -> Decision {
        if self.limit.delay.is_none() {
            // The store counted `remaining` above the class's reserve already.
            return d;
        }
        let plain = self.limit.spec.share(share);
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

    /// The decision shown for a limit no store could decide.
    pub(super) fn impossible(&self) -> Decision {
        Decision {
            allowed: false,
            ..Decision::full(self.limit.spec.burst)
        }
    }
}

/// The limits of one request, split into enforced and shadowed.
pub(super) struct Plan<'p> {
    pub(super) enforced: SmallVec<[Planned<'p>; 4]>,
    /// The first round's check of each enforced limit, in order: with the
    /// class's reserve, and on a delay limit its extension (the plain
    /// bucket). The store is asked these as they stand.
    pub(super) checks: SmallVec<[Check<'p>; 4]>,
    pub(super) shadowed: SmallVec<[Planned<'p>; 4]>,
    /// The client's plan, when a limit has priority classes.
    pub(super) class: Option<&'p str>,
    pub(super) style: HeadersConfig,
}

impl Plan<'_> {
    /// An empty plan, to be filled by [`Engine::plan`] in place (a plan is
    /// large enough that moving it shows on the request path).
    pub(super) fn new(style: HeadersConfig) -> Self {
        Self {
            enforced: SmallVec::new(),
            checks: SmallVec::new(),
            shadowed: SmallVec::new(),
            class: None,
            style,
        }
    }

    #[inline]
    pub(super) fn verdict(&self, checked: Checked, shadow: Shadow) -> Verdict {
        self.verdict_of(&checked, shadow)
    }

    /// The verdict of a decided plan: its enforced limits' results, and
    /// its shadowed ones'.
    #[inline(always)]
    pub(super) fn verdict_of(&self, checked: &Checked, shadow: Shadow) -> Verdict {
        // Filled in place: a collected list would be built, then moved.
        let mut verdict = Verdict {
            allowed: checked.allowed,
            fallback: checked.fallback(),
            results: Results::new(),
            shadow,
            style: self.style,
        };
        for (p, d) in self.enforced.iter().zip(&checked.decisions) {
            verdict.results.push(p.result(*d));
        }
        verdict
    }
}

impl<C: Clock> Engine<C> {
    /// Which limits apply to a request, under which keys, enforced or in
    /// shadow: written into `plan` (empty).
    pub(super) fn plan<'p>(
        &self,
        current: &'p Compiled,
        runtime: Option<&'p RuntimePlans>,
        req: &RequestInfo<'p>,
        plan: &mut Plan<'p>,
    ) -> Result<(), DecideError> {
        let access = current.policy.access(req);
        if access == Access::Denied {
            return Err(DecideError::Denied);
        }
        // Runtime plans are kept by key id: the key is hashed only when
        // some exist.
        let runtime_plan = |key: &str| runtime.and_then(|r| r.plan(self.hasher.key_id(key)));
        // Hash each distinct client key once: limits with the same key
        // source have the same key.
        let mut ids: SmallVec<[(&'p crate::KeySource, KeyId); 4]> = SmallVec::new();
        let client = current.policy.client_key();
        let mut place = |a: &crate::policy::Applied<'p>| {
            let key = match ids.iter().find(|(source, _)| **source == a.limit.key) {
                Some((_, id)) => *id,
                None => {
                    let id = a.key.id(&self.hasher);
                    ids.push((&a.limit.key, id));
                    id
                }
            };
            let allowed_client = access == Access::Allowed;
            let planned = Planned {
                limit: &a.limit.limit,
                counter: &current.counters[a.index],
                gate: current.gates[a.index].as_ref(),
                by_client: client == Some(&a.limit.key),
                key,
                cost: self.estimated(a, req),
                logged: true,
                // The HTTP adapters see the request end: slots are the
                // instance's.
                lease: None,
            };
            let enforced =
                !allowed_client && is_enforced(a.limit.shadow, a.limit.enforce_percent, key);
            plan.place(planned, enforced)
        };
        current.policy.resolve_each(req, runtime_plan, &mut place)?;
        // The client's plan is its priority class, where a limit has some.
        let class = if plan.enforced.iter().any(|p| !p.limit.max_share.is_empty()) {
            current.policy.client_plan(req, &runtime_plan)
        } else {
            None
        };
        plan.seal(class)
    }
}

impl<'p> Plan<'p> {
    /// Adds one applied limit, enforced or in shadow. An enforced limit
    /// whose cost exceeds its burst can never pass, on any store: the
    /// request is refused before anything is charged.
    pub(super) fn place(&mut self, p: Planned<'p>, enforced: bool) -> Result<(), DecideError> {
        if !enforced {
            self.shadowed.push(p);
            return Ok(());
        }
        if let Some(e) = too_costly(p.limit, p.cost) {
            return Err(e);
        }
        self.enforced.push(p);
        Ok(())
    }

    /// Ends a plan once every limit is placed: the client's priority
    /// `class` (refusing a cost beyond its share, which can never pass),
    /// and the first round's checks.
    pub(super) fn seal(&mut self, class: Option<&'p str>) -> Result<(), DecideError> {
        self.class = class;
        // On an error the plan is dropped: its checks are never asked.
        for p in &self.enforced {
            let reserve = p.limit.reserve_for(class);
            if reserve > 0 && p.cost > p.limit.spec.burst - reserve {
                return Err(beyond_share(p.limit, p.cost, reserve));
            }
            let extra = p.limit.delay.map_or(0, |d| d.extra);
            self.checks.push(p.check(reserve.saturating_add(extra)));
        }
        Ok(())
    }
}

/// The refusal of an enforced limit's cost beyond its burst, which can never
/// pass, on any store: the request is refused before anything is charged.
#[inline]
pub(super) fn too_costly(limit: &Limit, cost: u64) -> Option<DecideError> {
    (cost > limit.spec.burst).then(|| DecideError::Impossible {
        limit: limit.name.to_string(),
        cost,
        capacity: limit.spec.burst,
    })
}

/// A request whose cost exceeds what its priority class may ever use of a
/// limit (the burst less the other classes' reserve).
fn beyond_share(limit: &Limit, cost: u64, reserve: u64) -> DecideError {
    DecideError::Impossible {
        limit: limit.name.to_string(),
        cost,
        capacity: limit.spec.burst.saturating_sub(reserve),
    }
}

impl<C: Clock> Engine<C> {
    /// The cost a request is charged under an applied limit at admission: a
    /// settled limit's estimate, where the request names one where the rule
    /// says (a header, a field of its JSON body) and no caller set the
    /// cost; else the applied cost. A header that holds no whole number is
    /// ignored, and logged under a budget.
    #[inline]
    fn estimated(&self, a: &crate::policy::Applied<'_>, req: &RequestInfo<'_>) -> u64 {
        match &a.limit.limit.settle {
            Some(rule) if req.cost.is_none() => {
                let burst = a.limit.limit.spec.burst;
                rule.estimate_in(req, burst).unwrap_or_else(|| {
                    if let Some(field) = rule.malformed_estimate(req.headers) {
                        self.note_bad_cost(&a.limit.limit.name, field);
                    }
                    a.cost
                })
            }
            _ => a.cost,
        }
    }
}

/// Whether a limit is enforced for a key: not in shadow, and the key falls
/// in its `enforce_percent` (sticky: by the key's keyed hash).
fn is_enforced(shadow: bool, percent: u8, key: KeyId) -> bool {
    !shadow && (percent >= 100 || key.low() % 100 < u64::from(percent))
}
