//! Costs settled after the response: what an admitted request reserved
//! under its limits that settle (see [`settlement`](crate::settlement)),
//! and the settlement that charges or gives back the difference once the
//! actual cost is known.
//!
//! A settlement is never refused and never undoes the request. An actual
//! cost below the estimate is a refund of the difference (never above
//! full); one above it is a debit ([`Store::debit`]): what the limit has
//! left first, then debt up to the rule's `max_debt`, and what would pass
//! that is returned as excess, for the adapter to report.
//!
//! [`Store::debit`]: sluice_store::seam::Store::debit

use std::sync::Arc;

use sluice_core::{Clock, Decision};
use sluice_store::KeyId;
use sluice_store::seam::{Check, Counter, StoreError};
use smallvec::SmallVec;

use super::Engine;
use super::host_checked;
use super::plan::{Plan, Planned};
use super::verdict::{DecideError, Verdict};
use crate::labels::Labels;
use crate::policy::RequestInfo;
use crate::settlement::{Observed, Settlement};

/// One limit's share of a [`Reservation`].
#[derive(Debug, Clone)]
pub struct Reserved {
    /// How metrics name the limit.
    pub labels: Labels,
    /// The cost charged at admission (the estimate).
    pub charged: u64,
    /// The limit's rule.
    pub rule: Arc<Settlement>,
    counter: Counter,
    key: KeyId,
}

impl Reserved {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.labels.limit
    }

    /// The client key's keyed hash: a settlement moves this key only.
    pub fn key(&self) -> KeyId {
        self.key
    }
}

/// What an admitted request reserved under its limits that settle after
/// the response. Settle it with [`Engine::settle`]; one never settled
/// stands at its estimates.
#[derive(Debug, Clone, Default)]
pub struct Reservation {
    items: SmallVec<[Reserved; 2]>,
}

impl Reservation {
    /// The reservation of an admitted plan: each enforced limit with a
    /// rule, and each shadowed one with a rule that admitted it (a refused
    /// shadowed limit charged nothing). `None` when no limit settles.
    pub(super) fn of(plan: &Plan<'_>, verdict: &Verdict) -> Option<Self> {
        let reserved = |p: &Planned<'_>| {
            p.limit.settle.as_ref().map(|rule| Reserved {
                labels: p.limit.labels.clone(),
                charged: p.cost,
                rule: rule.clone(),
                counter: p.counter.clone(),
                key: p.key,
            })
        };
        let mut items: SmallVec<[Reserved; 2]> =
            plan.enforced.iter().filter_map(reserved).collect();
        let admitted_shadow = plan
            .shadowed
            .iter()
            .zip(verdict.shadow.iter())
            .filter(|(_, r)| r.decision.allowed)
            .filter_map(|(p, _)| reserved(p));
        items.extend(admitted_shadow);
        (!items.is_empty()).then_some(Self { items })
    }

    /// The limits reserved.
    pub fn items(&self) -> &[Reserved] {
        &self.items
    }

    /// Whether a rule reads the response body (its bytes or its usage).
    pub fn reads_body(&self) -> bool {
        self.items.iter().any(|r| r.rule.reads_body())
    }

    /// The shortest lease of its concurrency limits, in nanoseconds: how
    /// long a slot lives where no end of the request is seen. `None`
    /// without one.
    pub fn lease(&self) -> Option<sluice_core::Nanos> {
        self.items
            .iter()
            .filter_map(|r| match r.counter.def().limiter() {
                sluice_core::Limiter::Concurrency(c) => Some(c.lease()),
                _ => None,
            })
            .min()
    }

    /// The concurrency slots it holds: each slot limit's labels and the
    /// slots taken.
    pub fn slots(&self) -> impl Iterator<Item = (&Labels, u64)> {
        self.items
            .iter()
            .filter(|r| r.rule.is_slot())
            .map(|r| (&r.labels, r.charged))
    }

    /// Whether a rule reads a response header or trailer (so the adapter
    /// keeps the header fields until the settlement).
    pub fn reads_fields(&self) -> bool {
        self.items.iter().any(|r| {
            matches!(
                r.rule.from,
                crate::settlement::SettleFrom::Header(_)
                    | crate::settlement::SettleFrom::Trailer(_)
            )
        })
    }

    /// Whether a rule reads the usage the response reports.
    pub fn reads_usage(&self) -> bool {
        self.items
            .iter()
            .any(|r| matches!(r.rule.from, crate::settlement::SettleFrom::Usage(_)))
    }
}

/// How one limit's reservation was settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettledLimit {
    /// How metrics name the limit.
    pub labels: Labels,
    /// The estimate charged at admission.
    pub charged: u64,
    /// The actual cost.
    pub actual: u64,
    /// Given back (actual below the estimate).
    pub refunded: u64,
    /// Charged afterwards (actual above the estimate), debt included.
    pub debited: u64,
    /// Of `debited`, what went beyond what the key had left: the debt it
    /// incurred. Read from the key's state just before the debit, so that
    /// requests of the same key settled at the same moment may shift it
    /// between them (their sum holds); 0 when the state could not be read.
    pub into_debt: u64,
    /// Beyond the rule's `max_debt`: not charged, reported.
    pub excess: u64,
    /// Why the store could not settle it, if it could not: the estimate
    /// then stands.
    pub error: Option<String>,
    /// Whether it was a concurrency limit's slots, given back.
    pub slot: bool,
    /// The client key's keyed hash.
    pub key: KeyId,
    /// With debt incurred (`into_debt` > 0): the key's debt just after the
    /// debit, as the store's answer tells it; `None` otherwise, or when
    /// the store could not say.
    pub debt: Option<Debt>,
}

/// A key's debt just after a settlement put it there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Debt {
    /// How long until the limit's rate has paid it off (the key's
    /// `retry_after` then), in nanoseconds.
    pub paid_off_in: sluice_core::Nanos,
    /// The debt, in units of cost: what the limit's rate refills in
    /// `paid_off_in` (the windows pay theirs off in steps, at the same
    /// average).
    pub units: u64,
}

impl<C: Clock> Engine<C> {
    /// [`decide`](Self::decide), and for an admitted request the
    /// [`Reservation`] of its limits that settle after the response (none
    /// when no limit that applied settles): the adapter settles it with
    /// [`settle`](Self::settle) once the response is known.
    pub async fn decide_reserving(
        &self,
        req: &RequestInfo<'_>,
    ) -> Result<(Verdict, Option<Reservation>), DecideError> {
        // A store in this process, and no limit that settles: decided now,
        // on the path the tower layer takes.
        if let Some(decided) = self.decide_now(req) {
            return decided.map(|verdict| (verdict, None));
        }
        let path = crate::path::canonical(req.path)?;
        let req = &RequestInfo {
            path: &path,
            ..*req
        };
        let current = self.current.load_full();
        host_checked(&current.policy, req)?;
        let runtime = self
            .runtime_plans
            .in_force()
            .map(arc_swap::Guard::into_inner);
        let mut plan = Plan::new(current.policy.headers);
        self.plan(&current, runtime.as_deref(), req, &mut plan)?;
        let mut verdict = self.decide_plan(&plan).await?;
        if let Some(room) = super::slot_wait::room(&plan, &verdict) {
            verdict = self.wait_for_slot(&plan, room, verdict).await?;
        }
        let reservation = verdict
            .allowed
            .then(|| Reservation::of(&plan, &verdict))
            .flatten();
        Ok((verdict, reservation))
    }

    /// A reserved limit's key's state now, by a check of cost 0: it charges
    /// nothing (and moves a held slot's lease on, on a store that keeps
    /// leases).
    async fn peek(&self, r: &Reserved) -> Result<Option<Decision>, StoreError> {
        let peek = [Check {
            counter: &r.counter,
            key: r.key,
            cost: 0,
            reserve: 0,
            lease: None,
        }];
        Ok(self.store.check(&peek).await?.decisions.first().copied())
    }

    /// What a reserved limit's key has left now (a peek); `None` when the
    /// store could not say.
    async fn left(&self, r: &Reserved) -> Option<u64> {
        self.peek(r).await.ok().flatten().map(|d| d.remaining)
    }

    /// A reserved limit's key's debt now (a peek: a key in debt is refused,
    /// and its `retry_after` counts the debt); `None` when the store could
    /// not say or the key is not in debt.
    async fn debt_of(&self, r: &Reserved) -> Option<Debt> {
        let d = self.peek(r).await.ok().flatten().filter(|d| !d.allowed)?;
        let paid_off_in = d.retry_after?;
        let rate = r.counter.def().spec().rate;
        let units = u128::from(paid_off_in) * u128::from(rate.amount()) / u128::from(rate.period());
        Some(Debt {
            paid_off_in,
            units: u64::try_from(units).unwrap_or(u64::MAX),
        })
    }

    /// Logs, under a budget, a cost a request or an upstream sent in the
    /// field `field` of limit `limit` that is not one: it was ignored (the
    /// limit's own cost, or the estimate, stood).
    pub(crate) fn note_bad_cost(&self, limit: &str, field: &http::HeaderName) {
        if let Some(left_out) = self.cost_lines.take() {
            tracing::info!(limit, field = %field, left_out, "a cost that is not a whole number was ignored");
        }
    }

    /// Renews the leases of a reservation's concurrency slots, on a store
    /// that keeps leases (Redis: a peek by the instance holding slots moves
    /// their expiry one lease on). A response that streams longer than a
    /// lease renews its slots while it lasts; an instance that dies stops,
    /// and its slots come back one lease later. Failures are left to the
    /// next renewal.
    pub async fn renew(&self, reservation: &Reservation) {
        for r in &reservation.items {
            if !matches!(
                r.counter.def().limiter(),
                sluice_core::Limiter::Concurrency(_)
            ) {
                continue;
            }
            if let Err(e) = self.peek(r).await {
                tracing::debug!(limit = %r.labels.limit, error = %e, "a slot's lease was not renewed");
            }
        }
    }

    /// Settles a reservation with what the adapter observed: each limit's
    /// actual cost (its rule's [`actual`](Settlement::actual)) against its
    /// estimate, refunded or debited on the store, each limit on its own.
    /// Never fails as a whole: a limit the store could not settle says why,
    /// and keeps its estimate.
    pub async fn settle(
        &self,
        reservation: &Reservation,
        seen: &Observed<'_>,
    ) -> Vec<SettledLimit> {
        let mut out = Vec::with_capacity(reservation.items.len());
        for r in &reservation.items {
            if let Some(field) = r.rule.malformed(seen) {
                self.note_bad_cost(&r.labels.limit, field);
            }
            let actual = r.rule.actual(r.charged, seen);
            let mut done = SettledLimit {
                labels: r.labels.clone(),
                charged: r.charged,
                actual,
                refunded: 0,
                debited: 0,
                into_debt: 0,
                excess: 0,
                error: None,
                slot: r.rule.is_slot(),
                key: r.key,
                debt: None,
            };
            if actual < r.charged {
                let back = [Check {
                    counter: &r.counter,
                    key: r.key,
                    cost: r.charged - actual,
                    reserve: 0,
                    lease: None,
                }];
                match self.store.refund(&back).await {
                    Ok(_) => done.refunded = r.charged - actual,
                    Err(e) => done.error = Some(e.to_string()),
                }
                if let Some(room) = &r.rule.wait {
                    room.released();
                }
            } else if actual > r.charged {
                let more = actual - r.charged;
                let left = self.left(r).await;
                match self
                    .store
                    .debit(&r.counter, r.key, more, r.rule.max_debt)
                    .await
                {
                    Ok(d) => {
                        done.debited = d.charged;
                        done.into_debt = left.map_or(0, |l| d.charged.saturating_sub(l));
                        done.excess = d.excess;
                        if done.into_debt > 0 {
                            done.debt = self.debt_of(r).await;
                        }
                    }
                    Err(e) => done.error = Some(e.to_string()),
                }
            }
            out.push(done);
        }
        out
    }
}
