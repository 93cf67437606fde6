//! Adaptive overload protection at scrape time: the limit, requests in
//! flight, and what was admitted and shed, by class.

use std::sync::Arc;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use super::const_series::gauge;
use crate::overload::{ClassStatus, Overload, OverloadSnapshot};

/// The protection watched, once the data plane has one.
pub(super) type WatchedOverload = Arc<parking_lot::Mutex<Option<Arc<Overload>>>>;

/// The overload series, while the protection is on.
pub(super) fn encode_overload(
    encoder: &mut DescriptorEncoder,
    overload: &Overload,
) -> Result<(), std::fmt::Error> {
    let Some(s) = overload.snapshot() else {
        return Ok(());
    };
    let to_i64 = |n: u32| i64::from(n);
    gauge(
        encoder,
        "sluice_overload_limit",
        "The adaptive concurrency limit on the upstream",
        &[(Vec::new(), to_i64(s.limit))],
    )?;
    gauge(
        encoder,
        "sluice_overload_in_flight",
        "Requests in flight to the upstream, by priority class",
        &by_class(&s, |c| to_i64(c.in_flight)),
    )?;
    gauge(
        encoder,
        "sluice_overload_threshold",
        "The total in flight below which a class is admitted, at the current limit",
        &by_class(&s, |c| to_i64(c.threshold)),
    )?;
    class_counter(
        encoder,
        "sluice_overload_shed",
        "Requests shed (answered 503) by overload protection, by priority class",
        &s,
        |c| c.shed,
    )?;
    class_counter(
        encoder,
        "sluice_overload_admitted",
        "Requests admitted by overload protection, by priority class",
        &s,
        |c| c.admitted,
    )?;
    seconds(
        encoder,
        "sluice_overload_min_latency_seconds",
        "The upstream's minimum latency estimate (to the response head)",
        s.min_latency_s,
    )?;
    seconds(
        encoder,
        "sluice_overload_latency_seconds",
        "The upstream's latency percentile of the last sampling window",
        s.last_latency_s,
    )
}

/// One series per class, `class="<name>"`.
fn by_class<T>(
    s: &OverloadSnapshot,
    value: impl Fn(&ClassStatus) -> T,
) -> Vec<(Vec<(String, String)>, T)> {
    s.classes
        .iter()
        .map(|c| (vec![("class".to_owned(), c.name.clone())], value(c)))
        .collect()
}

/// A counter with one series per class.
fn class_counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    s: &OverloadSnapshot,
    value: impl Fn(&ClassStatus) -> u64,
) -> Result<(), std::fmt::Error> {
    let series = by_class(s, value);
    let borrowed: Vec<(Vec<(&str, &str)>, u64)> = series
        .iter()
        .map(|(labels, v)| {
            let labels = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            (labels, *v)
        })
        .collect();
    let refs: Vec<(&[(&str, &str)], u64)> =
        borrowed.iter().map(|(l, v)| (l.as_slice(), *v)).collect();
    super::const_series::counter(encoder, name, help, &refs)
}

/// A gauge in seconds, once known.
fn seconds(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: Option<f64>,
) -> Result<(), std::fmt::Error> {
    let Some(v) = value else {
        return Ok(());
    };
    let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(metric.encode_family(&Vec::<(String, String)>::new())?)
}
