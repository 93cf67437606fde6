//! Costs settled after the response: each limit's settlements by result,
//! the cost they moved, and the reservations `POST /v1/check` handed out.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use std::collections::BTreeMap;

use parking_lot::Mutex;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde::Serialize;
use sluice_policy::{Reservation, SettledLimit};

use super::Metrics;

/// How one limit's reservation was settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum SettleResult {
    /// The actual cost was the estimate: nothing moved.
    exact,
    /// Less than the estimate: the difference was given back.
    refunded,
    /// More than the estimate: the difference was charged (into debt if
    /// need be).
    debited,
    /// More than the rule's `max_debt` allows: part was not charged.
    excess,
    /// The store could not settle it: the estimate stands.
    failed,
}

/// What a settlement moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum CostMoved {
    /// Given back.
    refunded,
    /// Charged after the response.
    debited,
    /// Of what was charged after the response, what went beyond what the
    /// key had left: debt.
    into_debt,
    /// Beyond `max_debt`: reported, not charged.
    excess,
}

/// A settlement that found nothing to settle, or a reservation's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ReservationEvent {
    /// Handed out by `/v1/check`.
    opened,
    /// Settled by `/v1/settle`.
    settled,
    /// A settlement for an id never issued, or forgotten (404).
    unknown,
    /// A second settlement of one reservation (409).
    duplicate,
    /// A settlement that came after its reservation expired and was
    /// settled at its estimate (409).
    late,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SettleLabels {
    limit: Arc<str>,
    result: SettleResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct MovedLabels {
    limit: Arc<str>,
    direction: CostMoved,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct EventLabels {
    event: ReservationEvent,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SlotLabels {
    limit: Arc<str>,
}

/// One limit's settlements and slots, as the status page shows them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LimitSettlements {
    /// Settlements at the estimate.
    pub exact: u64,
    /// Settlements that gave cost back.
    pub refunded: u64,
    /// Settlements that charged more (debt included).
    pub debited: u64,
    /// Settlements with a part beyond `max_debt`.
    pub excess: u64,
    /// Settlements the store could not make.
    pub failed: u64,
    /// Cost given back.
    pub cost_refunded: u64,
    /// Cost charged after the response, debt included.
    pub cost_debited: u64,
    /// Of that, the debt incurred: cost charged beyond what keys had left.
    pub cost_into_debt: u64,
    /// Cost beyond `max_debt`, not charged.
    pub cost_excess: u64,
    /// A concurrency limit's slots held through this instance now.
    pub slots_held: i64,
    /// Keys this instance's settlements put into debt that are in debt
    /// still.
    pub keys_in_debt: u64,
    /// Their debt now, in units of cost (estimated: paid off evenly at the
    /// limit's rate).
    pub debt_now: u64,
}

/// The registered settlement metrics.
#[derive(Debug, Default)]
pub(super) struct SettleFamilies {
    settled: Family<SettleLabels, Counter>,
    moved: Family<MovedLabels, Counter>,
    events: Family<EventLabels, Counter>,
    slots: Family<SlotLabels, Gauge>,
    /// The same, per limit, for the status page (limit names come from
    /// the config: bounded).
    by_limit: Mutex<BTreeMap<Arc<str>, LimitSettlements>>,
    /// Keys in debt now, per limit.
    pub(super) debts: Arc<super::debts::Debts>,
}

impl SettleFamilies {
    /// Registers them in `registry`.
    pub(super) fn register(registry: &mut Registry) -> Self {
        let f = Self::default();
        registry.register(
            "sluice_settlements",
            "Reservations of limits that settle after the response, by limit and result",
            f.settled.clone(),
        );
        registry.register(
            "sluice_settled_cost",
            "Cost moved by settlements, by limit and direction (into_debt: the part of debited beyond what keys had left; excess: beyond max_debt, not charged)",
            f.moved.clone(),
        );
        registry.register(
            "sluice_reservations",
            "Reservations of /v1/check, by event",
            f.events.clone(),
        );
        registry.register(
            "sluice_slots_held",
            "Concurrency slots held through this instance now, by limit",
            f.slots.clone(),
        );
        f
    }
}

impl LimitSettlements {
    fn add(&mut self, s: &SettledLimit) {
        if s.error.is_some() {
            self.failed += 1;
        } else if s.excess > 0 {
            self.excess += 1;
        } else if s.debited > 0 {
            self.debited += 1;
        } else if s.refunded > 0 {
            self.refunded += 1;
        } else {
            self.exact += 1;
        }
        self.cost_refunded += s.refunded;
        self.cost_debited += s.debited;
        self.cost_into_debt += s.into_debt;
        self.cost_excess += s.excess;
        if s.slot && s.error.is_none() {
            self.slots_held -= i64::try_from(s.charged).unwrap_or(i64::MAX);
        }
    }
}

impl Metrics {
    /// Records the slots a reservation took (a request admitted under a
    /// concurrency limit): held until its settlement gives them back.
    pub fn record_reserved(&self, reservation: &Reservation) {
        let f = &self.settle;
        for (labels, n) in reservation.slots() {
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            let limit = labels.limit.clone();
            f.slots
                .get_or_create(&SlotLabels {
                    limit: limit.clone(),
                })
                .inc_by(n);
            f.by_limit.lock().entry(limit).or_default().slots_held += n;
        }
    }

    /// Each limit's settlements and slots so far, and its keys in debt
    /// now.
    pub fn settlements_by_limit(&self) -> BTreeMap<Arc<str>, LimitSettlements> {
        let mut all = self.settle.by_limit.lock().clone();
        for (limit, debt) in self.settle.debts.at(std::time::Instant::now()) {
            let l = all.entry(limit).or_default();
            l.keys_in_debt = debt.keys;
            l.debt_now = debt.units;
        }
        all
    }

    /// Records a request's settlement.
    pub fn record_settled(&self, settled: &[SettledLimit]) {
        let f = &self.settle;
        for s in settled {
            f.by_limit
                .lock()
                .entry(s.labels.limit.clone())
                .or_default()
                .add(s);
            if s.slot && s.error.is_none() {
                let n = i64::try_from(s.charged).unwrap_or(i64::MAX);
                f.slots
                    .get_or_create(&SlotLabels {
                        limit: s.labels.limit.clone(),
                    })
                    .dec_by(n);
            }
            let limit = s.labels.limit.clone();
            let result = if s.error.is_some() {
                SettleResult::failed
            } else if s.excess > 0 {
                SettleResult::excess
            } else if s.debited > 0 {
                SettleResult::debited
            } else if s.refunded > 0 {
                SettleResult::refunded
            } else {
                SettleResult::exact
            };
            f.settled
                .get_or_create(&SettleLabels {
                    limit: limit.clone(),
                    result,
                })
                .inc();
            for (direction, n) in [
                (CostMoved::refunded, s.refunded),
                (CostMoved::debited, s.debited),
                (CostMoved::into_debt, s.into_debt),
                (CostMoved::excess, s.excess),
            ] {
                if n > 0 {
                    f.moved
                        .get_or_create(&MovedLabels {
                            limit: limit.clone(),
                            direction,
                        })
                        .inc_by(n);
                }
            }
            if let Some(debt) = s.debt {
                f.debts
                    .record(&limit, s.key, debt, std::time::Instant::now());
            }
            if let Some(e) = &s.error {
                tracing::warn!(limit = %s.labels.limit, error = %e, "a settlement failed: the estimate stands");
            }
        }
    }

    /// Counts a reservation event.
    pub fn record_reservation(&self, event: ReservationEvent) {
        self.settle
            .events
            .get_or_create(&EventLabels { event })
            .inc();
    }

    /// Reservation events of `event` so far.
    pub fn reservation_events(&self, event: ReservationEvent) -> u64 {
        self.settle
            .events
            .get(&EventLabels { event })
            .map_or(0, |c| c.get())
    }

    /// Settlements of `limit` with `result` so far.
    pub fn settlements(&self, limit: &str, result: SettleResult) -> u64 {
        self.settle
            .settled
            .get(&SettleLabels {
                limit: limit.into(),
                result,
            })
            .map_or(0, |c| c.get())
    }
}
