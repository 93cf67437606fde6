//! Prometheus metrics, served at `GET /metrics` on `control_listen` in the
//! OpenMetrics text format.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `sluice_requests_total` | `outcome` | requests by outcome: `allowed`, `limited`, `denied`, `missing_key`, `invalid`, `store_unavailable`, `internal` |
//! | `sluice_decisions_total` | `limit`, `plan`, `endpoint`, `outcome` | each limit's decisions: `allowed`, `limited`, `delayed`, `shadow_allowed`, `shadow_limited` |
//! | `sluice_limited_within_plan_total` | — | refusals of clients their plan limits admitted (refused by another limit) |
//! | `sluice_limited_retry_after_seconds` | `limit` | histogram of the time until a refused request could pass |
//! | `sluice_queue_wait_seconds` | — | histogram of the delay of admitted requests held for smoothing |
//! | `sluice_fallback_decisions_total` | `mode` | decisions made by the fallback while Redis could not |
//! | `sluice_store_latency_seconds` | — | histogram of Redis calls |
//! | `sluice_store_errors_total` | `kind` | failed Redis calls: `error`, `timeout` |
//! | `sluice_store_over_limit_cache_hits_total` | — | refusals answered by the over-limit cache |
//! | `sluice_store_breaker_state` | — | 0 closed, 1 open (fallback deciding), 2 half-open |
//! | `sluice_store_fallback_settled_total` | — | cost the fallback admitted during an outage, charged to Redis after it |
//! | `sluice_store_fallback_unrecorded_total` | — | fallback admissions not recorded for charging (the ledger was full) |
//! | `sluice_store_fallback_owed_keys` | — | (limit, key) pairs still owed to Redis |
//! | `sluice_store_info` | `store` | 1, labelled `memory` or `redis` |
//! | `sluice_redis_maxmemory_policy` | `node`, `policy` | 1 per Redis node, labelled with its `maxmemory-policy` as last read |
//! | `sluice_redis_evicted_keys_total` | `node` | each Redis node's own `evicted_keys` (since it started), as last read |
//! | `sluice_connections_open` | `listener` | open connections: `data`, `control` |
//! | `sluice_connections_refused_total` | `listener`, `reason` | connections refused at accept: `full`, `per_client` |
//! | `sluice_connections_closed_total` | `listener`, `reason` | connections closed by a timeout: `slow_head`, `idle` |
//! | `sluice_config_reloads_total` | `result` | reloads of every config, the TOML and Envoy's YAML files or xDS sets alike: `success`, `failure` |
//! | `sluice_config_removed_total` | `kind` | limits and plans that reloads removed: `limit`, `plan` |
//! | `sluice_config_info` | `version` | 1, labelled with the config's hash |
//! | `sluice_top_limited_key_requests` | `rank`, `key` | the most-limited keys (keyed hash prefixes), at most 10 series |
//! | `sluice_account_events_total` | `result` | account-manager events: `emitted`, `delivered`, `failed`, `dropped` |
//! | `sluice_settlements_total` | `limit`, `result` | reservations settled after the response: `exact`, `refunded`, `debited`, `excess`, `failed` |
//! | `sluice_settled_cost_total` | `limit`, `direction` | cost moved by settlements: `refunded`, `debited`, `excess` (beyond `max_debt`, not charged) |
//! | `sluice_reservations_total` | `event` | `/v1/check` reservations: `opened`, `settled`, `unknown` (404), `duplicate` (409) |
//! | `sluice_slots_held` | `limit` | concurrency slots held through this instance now |
//! | `sluice_reservations_open` | — | `/v1/check` reservations not yet settled or expired |
//! | `sluice_keys_in_debt` | `limit` | keys this instance's settlements put into debt, in debt still |
//! | `sluice_debt` | `limit` | their debt now, in units of cost (estimated: paid off evenly at the limit's rate) |
//! | `sluice_reservations_expired_total` | — | `/v1/check` reservations never settled (they stand at their estimate) |
//! | `sluice_overload_limit` | — | overload protection's adaptive concurrency limit on the upstream |
//! | `sluice_overload_in_flight` | `class` | requests in flight to the upstream, by priority class (plan) |
//! | `sluice_overload_threshold` | `class` | total in flight below which a class is admitted now |
//! | `sluice_overload_shed_total` | `class` | requests shed (503) by overload protection |
//! | `sluice_overload_admitted_total` | `class` | requests admitted by overload protection |
//! | `sluice_overload_min_latency_seconds` | — | the upstream's minimum latency estimate (to the response head) |
//! | `sluice_overload_latency_seconds` | — | the last sampling window's latency percentile |
//!
//! With the Envoy service, its per-rule statistics are served beside these
//! ([`Metrics::with_collector`]; see `sluice_envoy::stats`).
//!
//! Every label value comes from the config or a fixed set: no label grows
//! with traffic (but the Envoy service's `detailed_metric` series, which are
//! capped). Keys appear only as keyed-hash prefixes in the bounded
//! top-K.
//!
//! The metrics kept in the registry are registered by `families`, and
//! updated by `record`; the rest are read at scrape time by the collector
//! in `live_state`, with the store's (`store_gauges`) and listeners'
//! (`listener_gauges`) sections, written by `const_series`.

mod const_series;
mod debts;
mod eviction_gauges;
mod families;
mod labels;
mod listener_gauges;
mod live_state;
mod overload_gauges;
mod record;
mod series;
mod settlements;
mod store_gauges;

pub use debts::InDebt;
pub use labels::{LimitOutcome, RequestOutcome};
pub use settlements::{CostMoved, LimitSettlements, ReservationEvent, SettleResult};

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::registry::Registry;
use sluice_policy::Engine;

use crate::account_events::AccountEvents;
use crate::conn_limits::ConnLimits;
use crate::rejection_log::RejectionLog;
use crate::reload::Reloader;
use crate::top_keys::TopKeys;
use families::Families;
use labels::RequestLabels;
use listener_gauges::Listeners;
use live_state::LiveState;

/// How many of the most-limited keys `/metrics` shows.
pub const TOP_KEYS: usize = 10;

/// What the server records, and the registry it is served from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    families: Families,
    settle: settlements::SettleFamilies,
    top: Arc<TopKeys>,
    rejections: RejectionLog,
    events: Arc<AccountEvents>,
    listeners: Listeners,
    reservations: live_state::Watched,
    overload: overload_gauges::WatchedOverload,
}

impl Metrics {
    /// Metrics for a server running `engine`, with its reloader if any.
    pub fn new(engine: &Arc<Engine>, reloader: Option<Arc<Reloader>>) -> Self {
        let mut registry = Registry::default();
        let families = Families::register(&mut registry, engine);
        let settle = settlements::SettleFamilies::register(&mut registry);
        let top = Arc::new(TopKeys::new(64, Duration::from_secs(60)));
        let events = Arc::new(AccountEvents::new(engine.clone()));
        let listeners = Listeners::default();
        let reservations = live_state::Watched::default();
        let overload = overload_gauges::WatchedOverload::default();
        registry.register_collector(Box::new(LiveState {
            engine: engine.clone(),
            reloader,
            top: top.clone(),
            events: events.clone(),
            listeners: listeners.clone(),
            reservations: reservations.clone(),
            overload: overload.clone(),
            debts: settle.debts.clone(),
        }));
        Self {
            registry,
            families,
            settle,
            top,
            rejections: RejectionLog::default(),
            events,
            listeners,
            reservations,
            overload,
        }
    }

    /// Serves another component's metrics, read at scrape time, beside
    /// these (the Envoy service's per-rule statistics).
    pub fn with_collector(mut self, collector: impl Collector + 'static) -> Self {
        self.registry.register_collector(Box::new(collector));
        self
    }

    /// Reports a listener's open, refused and closed connections, as
    /// `listener="<name>"`.
    pub fn watch_listener(&self, name: &'static str, limits: Arc<ConnLimits>) {
        self.listeners.lock().push((name, limits));
    }

    /// Settlements, slots and reservations, for the status page.
    pub fn settlement_status(&self) -> crate::status_page::SettlementStatus {
        let reservations = self.reservations.lock().clone();
        let (open, expired) = reservations.as_ref().map_or((0, 0), |r| r.counts());
        let next = reservations.as_ref().and_then(|r| r.next_expiry());
        crate::status_page::SettlementStatus {
            reservations_open: open,
            reservations_expired: expired,
            next_expiry_ms: next.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            settled_late: self.reservation_events(ReservationEvent::late),
            settled_unknown: self.reservation_events(ReservationEvent::unknown),
            settled_twice: self.reservation_events(ReservationEvent::duplicate),
            limits: self
                .settlements_by_limit()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        }
    }

    /// Reports the control API's open and expired reservations.
    pub fn watch_reservations(&self, reservations: Arc<crate::reservations::Reservations>) {
        *self.reservations.lock() = Some(reservations);
    }

    /// Reports overload protection's limit, in flight and sheds (while it
    /// is on), and shows them on the status page.
    pub fn watch_overload(&self, overload: Arc<crate::overload::Overload>) {
        *self.overload.lock() = Some(overload);
    }

    /// Overload protection's state now; `None` when none is watched or it
    /// is off.
    pub fn overload(&self) -> Option<crate::overload::OverloadSnapshot> {
        let watched = self.overload.lock().clone();
        watched.and_then(|o| o.snapshot())
    }

    /// Requests so far with this outcome.
    pub fn requests(&self, outcome: RequestOutcome) -> u64 {
        self.families
            .requests
            .get(&RequestLabels { outcome })
            .map_or(0, |c| c.get())
    }

    /// The most-limited keys now.
    pub fn top_keys(&self, k: usize) -> Vec<crate::top_keys::TopKey> {
        self.top.top(k)
    }

    /// The exposition, in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::error!(error = %e, "cannot encode the metrics");
        }
        out
    }
}
