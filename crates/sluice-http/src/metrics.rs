//! Prometheus metrics, served at `GET /metrics` on `control_listen` in the
//! OpenMetrics text format.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `sluice_requests_total` | `outcome` | requests by outcome: `allowed`, `limited`, `denied`, `missing_key`, `invalid`, `store_unavailable` |
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
//! | `sluice_connections_open` | `listener` | open connections: `data`, `control` |
//! | `sluice_connections_refused_total` | `listener`, `reason` | connections refused at accept: `full`, `per_client` |
//! | `sluice_connections_closed_total` | `listener`, `reason` | connections closed by a timeout: `slow_head`, `idle` |
//! | `sluice_config_reloads_total` | `result` | `success`, `failure` |
//! | `sluice_config_removed_total` | `kind` | limits and plans that reloads removed: `limit`, `plan` |
//! | `sluice_config_info` | `version` | 1, labelled with the config's hash |
//! | `sluice_top_limited_key_requests` | `rank`, `key` | the most-limited keys (keyed hash prefixes), at most 10 series |
//! | `sluice_account_events_total` | `result` | account-manager events: `emitted`, `delivered`, `failed`, `dropped` |
//!
//! Every label value comes from the config or a fixed set: no label grows
//! with traffic. Keys appear only as keyed-hash prefixes in the bounded
//! top-K.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeLabelSet, EncodeLabelValue, EncodeMetric,
};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sluice_policy::{DecideError, Engine, LimitLabels, Outcome, Verdict};
use sluice_store::seam::{BreakerState, RemoteHealth};

use crate::account_events::AccountEvents;
use crate::conn_limits::ConnLimits;
use crate::rejection_log::RejectionLog;
use crate::reload::Reloader;
use crate::top_keys::TopKeys;

/// How many of the most-limited keys `/metrics` shows.
pub const TOP_KEYS: usize = 10;

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RequestOutcome {
    /// Admitted.
    allowed,
    /// Refused by a limit (429).
    limited,
    /// On the deny list (403).
    denied,
    /// Lacked the key a limit counts by (401).
    missing_key,
    /// Cost no limit could ever admit (400).
    invalid,
    /// Refused by the `deny` fallback while Redis was down (503).
    store_unavailable,
}

impl From<Outcome> for RequestOutcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Allowed | Outcome::Delayed => Self::allowed,
            Outcome::Limited => Self::limited,
            Outcome::StoreUnavailable => Self::store_unavailable,
            Outcome::MissingKey => Self::missing_key,
            Outcome::Denied => Self::denied,
            Outcome::Invalid => Self::invalid,
        }
    }
}

/// One limit's outcome for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum LimitOutcome {
    /// The limit admitted it.
    allowed,
    /// The limit refused it.
    limited,
    /// The limit admitted it after a wait.
    delayed,
    /// A shadow limit that would have admitted it.
    shadow_allowed,
    /// A shadow limit that would have refused it.
    shadow_limited,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct RequestLabels {
    outcome: RequestOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DecisionLabels {
    limit: Arc<str>,
    plan: Arc<str>,
    endpoint: Arc<str>,
    outcome: LimitOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct LimitNameLabels {
    limit: Arc<str>,
}

/// What the server records, and the registry it is served from.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    decisions: Family<DecisionLabels, Counter>,
    within_plan: Counter,
    retry_after: Family<LimitNameLabels, Histogram>,
    queue_wait: Histogram,
    top: Arc<TopKeys>,
    rejections: RejectionLog,
    events: Arc<AccountEvents>,
    listeners: Listeners,
}

/// The listeners whose connections are reported, by name.
type Listeners = Arc<parking_lot::Mutex<Vec<(&'static str, Arc<ConnLimits>)>>>;

fn seconds_histogram() -> Histogram {
    // 1 ms to about 18 h.
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

impl Metrics {
    /// Metrics for a server running `engine`, with its reloader if any.
    pub fn new(engine: &Arc<Engine>, reloader: Option<Arc<Reloader>>) -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "sluice_requests",
            "Requests decided, by outcome",
            requests.clone(),
        );
        let decisions = Family::<DecisionLabels, Counter>::default();
        registry.register(
            "sluice_decisions",
            "Each applied limit's decisions, by limit, plan, endpoint and outcome",
            decisions.clone(),
        );
        let within_plan = Counter::default();
        registry.register(
            "sluice_limited_within_plan",
            "Refused requests whose plan limits all admitted them (refused by another limit)",
            within_plan.clone(),
        );
        let retry_after = Family::<LimitNameLabels, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> Histogram,
        );
        registry.register(
            "sluice_limited_retry_after_seconds",
            "Time until a refused request could pass, by the refusing limit",
            retry_after.clone(),
        );
        let queue_wait = seconds_histogram();
        registry.register(
            "sluice_queue_wait_seconds",
            "How long admitted requests were held for smoothing",
            queue_wait.clone(),
        );
        let store_latency = Histogram::new(exponential_buckets(0.000_05, 2.0, 16));
        let h = store_latency.clone();
        engine
            .store()
            .observe_calls(Box::new(move |took, _ok| h.observe(took.as_secs_f64())));
        registry.register(
            "sluice_store_latency_seconds",
            "Latency of calls to the shared store (Redis)",
            store_latency,
        );
        let top = Arc::new(TopKeys::new(64, Duration::from_secs(60)));
        let events = Arc::new(AccountEvents::new(engine.clone()));
        let listeners = Listeners::default();
        registry.register_collector(Box::new(LiveState {
            engine: engine.clone(),
            reloader,
            top: top.clone(),
            events: events.clone(),
            listeners: listeners.clone(),
        }));
        Self {
            registry,
            requests,
            decisions,
            within_plan,
            retry_after,
            queue_wait,
            top,
            rejections: RejectionLog::default(),
            events,
            listeners,
        }
    }

    /// Reports a listener's open, refused and closed connections, as
    /// `listener="<name>"`.
    pub fn watch_listener(&self, name: &'static str, limits: Arc<ConnLimits>) {
        self.listeners.lock().push((name, limits));
    }

    /// Records a decided request.
    pub fn record(&self, verdict: &Verdict) {
        let outcome = RequestOutcome::from(Outcome::of_verdict(verdict));
        self.requests
            .get_or_create(&RequestLabels { outcome })
            .inc();
        let delay = verdict.delay();
        if verdict.allowed && delay > 0 {
            self.queue_wait
                .observe(Duration::from_nanos(delay).as_secs_f64());
        }
        let mut plan_refused = false;
        for r in &verdict.results {
            let outcome = match (r.decision.allowed, r.decision.delay > 0) {
                (false, _) => LimitOutcome::limited,
                (true, true) => LimitOutcome::delayed,
                (true, false) => LimitOutcome::allowed,
            };
            self.count(&r.labels, outcome);
            if !r.decision.allowed {
                plan_refused |= !r.labels.plan.is_empty();
                if let Some(retry) = r.decision.retry_after {
                    self.retry_after
                        .get_or_create(&LimitNameLabels {
                            limit: r.labels.limit.clone(),
                        })
                        .observe(Duration::from_nanos(retry).as_secs_f64());
                }
            }
        }
        for r in &verdict.shadow {
            let outcome = if r.decision.allowed {
                LimitOutcome::shadow_allowed
            } else {
                LimitOutcome::shadow_limited
            };
            self.count(&r.labels, outcome);
        }
        if outcome == RequestOutcome::limited {
            self.rejections.refused(verdict);
            self.events.refused(verdict);
            if !plan_refused && verdict.results.iter().any(|r| !r.labels.plan.is_empty()) {
                self.within_plan.inc();
            }
            // The key the request was refused under, once per request.
            if let Some(r) = verdict.violated().next() {
                self.top.record(r.key);
            }
        }
    }

    fn count(&self, labels: &LimitLabels, outcome: LimitOutcome) {
        self.decisions
            .get_or_create(&DecisionLabels {
                limit: labels.limit.clone(),
                plan: labels.plan.clone(),
                endpoint: labels.endpoint.clone(),
                outcome,
            })
            .inc();
    }

    /// Records a request that could not be decided.
    pub fn record_error(&self, e: &DecideError) {
        let outcome = RequestOutcome::from(Outcome::of_error(e));
        self.requests
            .get_or_create(&RequestLabels { outcome })
            .inc();
    }

    /// Records either.
    pub fn record_result(&self, decided: &Result<Verdict, DecideError>) {
        match decided {
            Ok(v) => self.record(v),
            Err(e) => self.record_error(e),
        }
    }

    /// Requests so far with this outcome.
    pub fn requests(&self, outcome: RequestOutcome) -> u64 {
        self.requests
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

/// Values read at scrape time: the shared store's counters and breaker,
/// reloads, the config version and the top keys.
#[derive(Debug)]
struct LiveState {
    engine: Arc<Engine>,
    reloader: Option<Arc<Reloader>>,
    top: Arc<TopKeys>,
    events: Arc<AccountEvents>,
    listeners: Listeners,
}

/// Each listener's connections: open now, refused and closed so far.
fn encode_listeners(
    encoder: &mut DescriptorEncoder,
    listeners: &[(&'static str, Arc<ConnLimits>)],
) -> Result<(), std::fmt::Error> {
    if listeners.is_empty() {
        return Ok(());
    }
    let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    gauge(
        encoder,
        "sluice_connections_open",
        "Open connections, by listener",
        &listeners
            .iter()
            .map(|(name, l)| {
                let open = i64::try_from(l.open()).unwrap_or(i64::MAX);
                (vec![("listener".to_owned(), (*name).to_owned())], open)
            })
            .collect::<Vec<_>>(),
    )?;
    let series = |f: &dyn Fn(&ConnLimits) -> [(&'static str, u64); 2]| {
        listeners
            .iter()
            .flat_map(|(name, l)| f(l).map(|(reason, n)| (*name, reason, n)))
            .collect::<Vec<_>>()
    };
    let refused = series(&|l| {
        [
            ("full", load(&l.refused_full)),
            ("per_client", load(&l.refused_per_client)),
        ]
    });
    let closed = series(&|l| {
        [
            ("slow_head", load(&l.closed_slow_head)),
            ("idle", load(&l.closed_idle)),
        ]
    });
    for (metric, help, rows) in [
        (
            "sluice_connections_refused",
            "Connections refused at accept, by listener and cap",
            &refused,
        ),
        (
            "sluice_connections_closed",
            "Connections closed by a timeout, by listener and reason",
            &closed,
        ),
    ] {
        let labels: Vec<[(&str, &str); 2]> = rows
            .iter()
            .map(|(name, reason, _)| [("listener", *name), ("reason", *reason)])
            .collect();
        let values: Vec<(&[(&str, &str)], u64)> = labels
            .iter()
            .zip(rows.iter())
            .map(|(l, (_, _, n))| (&l[..], *n))
            .collect();
        counter(encoder, metric, help, &values)?;
    }
    Ok(())
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(&[(&str, &str)], u64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (labels, value) in series {
        let labels: Vec<(String, String)> = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        ConstCounter::new(*value).encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    series: &[(Vec<(String, String)>, i64)],
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(
        name,
        help,
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    for (labels, value) in series {
        ConstGauge::new(*value).encode(metric.encode_family(labels)?)?;
    }
    Ok(())
}

impl Collector for LiveState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let health = self.engine.remote_health();
        let store = if health.is_some() { "redis" } else { "memory" };
        gauge(
            &mut encoder,
            "sluice_store_info",
            "The store the limits live in",
            &[(vec![("store".to_owned(), store.to_owned())], 1)],
        )?;
        if let Some(health) = &health {
            encode_remote(&mut encoder, health)?;
        }
        encode_listeners(&mut encoder, &self.listeners.lock())?;
        if let Some(r) = &self.reloader {
            counter(
                &mut encoder,
                "sluice_config_reloads",
                "Config reloads, by result",
                &[
                    (&[("result", "success")], r.succeeded()),
                    (&[("result", "failure")], r.failed()),
                ],
            )?;
            let (limits, plans) = r.removed();
            counter(
                &mut encoder,
                "sluice_config_removed",
                "Limits and plans that config reloads removed",
                &[(&[("kind", "limit")], limits), (&[("kind", "plan")], plans)],
            )?;
            gauge(
                &mut encoder,
                "sluice_config_info",
                "The config in force, by the hash of its text",
                &[(vec![("version".to_owned(), r.version())], 1)],
            )?;
        }
        let e = self.events.counters();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        counter(
            &mut encoder,
            "sluice_account_events",
            "Account-manager events (a key over its plan's alert threshold), by what became of them",
            &[
                (&[("result", "emitted")], load(&e.emitted)),
                (&[("result", "delivered")], load(&e.delivered)),
                (&[("result", "failed")], load(&e.failed)),
                (&[("result", "dropped")], load(&e.dropped)),
            ],
        )?;
        let top: Vec<(Vec<(String, String)>, i64)> = self
            .top
            .top(TOP_KEYS)
            .iter()
            .enumerate()
            .map(|(i, k)| {
                (
                    vec![
                        ("rank".to_owned(), (i + 1).to_string()),
                        ("key".to_owned(), k.label()),
                    ],
                    i64::try_from(k.count).unwrap_or(i64::MAX),
                )
            })
            .collect();
        gauge(
            &mut encoder,
            "sluice_top_limited_key_requests",
            "The most-limited keys (keyed-hash prefixes) and their recent refusals, halved every minute",
            &top,
        )
    }
}

fn encode_remote(encoder: &mut DescriptorEncoder, h: &RemoteHealth) -> Result<(), std::fmt::Error> {
    let mode = h.fallback.name();
    counter(
        encoder,
        "sluice_fallback_decisions",
        "Decisions made by the fallback while Redis could not decide",
        &[(&[("mode", mode)], h.fallback_decisions)],
    )?;
    counter(
        encoder,
        "sluice_store_errors",
        "Failed calls to Redis, by kind",
        &[
            (&[("kind", "error")], h.store_errors),
            (&[("kind", "timeout")], h.store_timeouts),
        ],
    )?;
    counter(
        encoder,
        "sluice_store_over_limit_cache_hits",
        "Refusals answered by the over-limit cache without a Redis call",
        &[(&[], h.cache_hits)],
    )?;
    counter(
        encoder,
        "sluice_store_fallback_settled",
        "Cost the fallback admitted during an outage and charged to Redis after it",
        &[(&[], h.owed_settled)],
    )?;
    counter(
        encoder,
        "sluice_store_fallback_unrecorded",
        "Fallback admissions not recorded for charging to Redis (the ledger was full)",
        &[(&[], h.owed_dropped)],
    )?;
    gauge(
        encoder,
        "sluice_store_fallback_owed_keys",
        "(limit, key) pairs whose fallback admissions Redis has not been charged yet",
        &[(Vec::new(), i64::try_from(h.owed_pairs).unwrap_or(i64::MAX))],
    )?;
    let state = match h.breaker {
        BreakerState::Closed => 0,
        BreakerState::Open => 1,
        BreakerState::HalfOpen => 2,
    };
    gauge(
        encoder,
        "sluice_store_breaker_state",
        "The Redis circuit breaker: 0 closed, 1 open (the fallback decides), 2 half-open",
        &[(Vec::new(), state)],
    )
}
