//! Costs settled after the response: each limit's settlements by result,
//! the cost they moved, and the reservations `POST /v1/check` handed out.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use sluice_policy::SettledLimit;

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
    /// A settlement for an id never issued, or expired (404).
    unknown,
    /// A second settlement of one reservation (409).
    duplicate,
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

/// The registered settlement metrics.
#[derive(Debug, Default)]
pub(super) struct SettleFamilies {
    settled: Family<SettleLabels, Counter>,
    moved: Family<MovedLabels, Counter>,
    events: Family<EventLabels, Counter>,
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
            "Cost moved by settlements, by limit and direction (excess: beyond max_debt, not charged)",
            f.moved.clone(),
        );
        registry.register(
            "sluice_reservations",
            "Reservations of /v1/check, by event",
            f.events.clone(),
        );
        f
    }
}

impl Metrics {
    /// Records a request's settlement.
    pub fn record_settled(&self, settled: &[SettledLimit]) {
        let f = &self.settle;
        for s in settled {
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
