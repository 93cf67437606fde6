//! The metrics kept in the registry: counters and histograms updated as
//! requests are decided, and the store-latency histogram fed by the
//! engine's store. Registered in this order, they are encoded in it.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use sluice_policy::Engine;

use super::labels::{DecisionLabels, LimitNameLabels, RequestLabels};

/// The registered metrics that [`Metrics::record`](super::Metrics::record)
/// updates.
#[derive(Debug)]
pub(super) struct Families {
    /// `sluice_requests_total`.
    pub(super) requests: Family<RequestLabels, Counter>,
    /// `sluice_decisions_total`.
    pub(super) decisions: Family<DecisionLabels, Counter>,
    /// `sluice_limited_within_plan_total`.
    pub(super) within_plan: Counter,
    /// `sluice_limited_retry_after_seconds`.
    pub(super) retry_after: Family<LimitNameLabels, Histogram>,
    /// `sluice_queue_wait_seconds`.
    pub(super) queue_wait: Histogram,
    /// The series of `requests` and `decisions` found so far.
    pub(super) series: super::series::Series,
}

/// A histogram of seconds, from 1 ms to about 18 h.
fn seconds_histogram() -> Histogram {
    // 1 ms to about 18 h.
    Histogram::new(exponential_buckets(0.001, 4.0, 12))
}

impl Families {
    /// Registers the decision metrics, then the store latency that
    /// `engine`'s store reports, in `registry`.
    pub(super) fn register(registry: &mut Registry, engine: &Engine) -> Self {
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
        register_store_latency(registry, engine);
        Self {
            requests,
            decisions,
            within_plan,
            retry_after,
            queue_wait,
            series: super::series::Series::default(),
        }
    }
}

/// Registers `sluice_store_latency_seconds`, observed on every call
/// `engine`'s store makes.
fn register_store_latency(registry: &mut Registry, engine: &Engine) {
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
}
