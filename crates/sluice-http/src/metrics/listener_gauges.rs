//! The listeners' connections at scrape time: open now, refused at accept
//! and closed by a timeout so far, by listener.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::encoding::DescriptorEncoder;

use super::const_series::{counter, gauge};
use crate::conn_limits::ConnLimits;

/// The listeners whose connections are reported, by name.
pub(super) type Listeners = Arc<parking_lot::Mutex<Vec<(&'static str, Arc<ConnLimits>)>>>;

/// Each listener's connections: open now, refused and closed so far.
pub(super) fn encode_listeners(
    encoder: &mut DescriptorEncoder,
    listeners: &[(&'static str, Arc<ConnLimits>)],
) -> Result<(), std::fmt::Error> {
    if listeners.is_empty() {
        return Ok(());
    }
    encode_open(encoder, listeners)?;
    encode_by_reason(
        encoder,
        "sluice_connections_refused",
        "Connections refused at accept, by listener and cap",
        listeners,
        |l| {
            vec![
                ("full", load(&l.refused_full)),
                ("per_client", load(&l.refused_per_client)),
            ]
        },
    )?;
    encode_by_reason(
        encoder,
        "sluice_connections_closed",
        "Connections closed by a timeout, by listener and reason",
        listeners,
        |l| {
            vec![
                ("slow_head", load(&l.closed_slow_head)),
                ("idle", load(&l.closed_idle)),
                ("slow_send", load(&l.closed_slow_send)),
            ]
        },
    )
}

/// A connection count now.
fn load(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// `sluice_connections_open`, by listener.
fn encode_open(
    encoder: &mut DescriptorEncoder,
    listeners: &[(&'static str, Arc<ConnLimits>)],
) -> Result<(), std::fmt::Error> {
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
    )
}

/// The counter `metric`, labelled by listener and by the reasons and counts
/// that `counts` reads from each listener's limits.
fn encode_by_reason(
    encoder: &mut DescriptorEncoder,
    metric: &str,
    help: &str,
    listeners: &[(&'static str, Arc<ConnLimits>)],
    counts: impl Fn(&ConnLimits) -> Vec<(&'static str, u64)>,
) -> Result<(), std::fmt::Error> {
    let rows: Vec<(&str, &str, u64)> = listeners
        .iter()
        .flat_map(|(name, l)| counts(l).into_iter().map(|(reason, n)| (*name, reason, n)))
        .collect();
    let labels: Vec<[(&str, &str); 2]> = rows
        .iter()
        .map(|(name, reason, _)| [("listener", *name), ("reason", *reason)])
        .collect();
    let values: Vec<(&[(&str, &str)], u64)> = labels
        .iter()
        .zip(rows.iter())
        .map(|(l, (_, _, n))| (&l[..], *n))
        .collect();
    counter(encoder, metric, help, &values)
}
