//! Writing a metric whose values are read at scrape time, not kept in the
//! registry: a counter or a gauge, each with its series.

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Writes the counter `name` with one series per label set and value.
pub(super) fn counter(
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

/// Writes the gauge `name` with one series per label set and value.
pub(super) fn gauge(
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
