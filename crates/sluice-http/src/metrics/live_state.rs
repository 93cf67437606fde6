//! The collector of values read at scrape time, and its sections for
//! config reloads, account events and the most-limited keys; the store's
//! and the listeners' sections have files of their own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use sluice_policy::Engine;

use super::TOP_KEYS;
use super::const_series::{counter, gauge};
use super::listener_gauges::{Listeners, encode_listeners};
use super::store_gauges::encode_store;
use crate::account_events::AccountEvents;
use crate::reload::Reloader;
use crate::top_keys::TopKeys;

/// Values read at scrape time: the shared store's counters and breaker,
/// reloads, the config version and the top keys.
#[derive(Debug)]
pub(super) struct LiveState {
    pub(super) engine: Arc<Engine>,
    pub(super) reloader: Option<Arc<Reloader>>,
    pub(super) top: Arc<TopKeys>,
    pub(super) events: Arc<AccountEvents>,
    pub(super) listeners: Listeners,
    pub(super) reservations: Watched,
    pub(super) overload: super::overload_gauges::WatchedOverload,
    pub(super) debts: Arc<super::debts::Debts>,
}

/// The `/v1/check` reservations, once the control API has them.
pub(super) type Watched = Arc<parking_lot::Mutex<Option<Arc<crate::reservations::Reservations>>>>;

impl Collector for LiveState {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let health = self.engine.remote_health();
        encode_store(&mut encoder, self.engine.store().kind(), health.as_ref())?;
        encode_listeners(&mut encoder, &self.listeners.lock())?;
        if let Some(r) = &self.reloader {
            encode_reloads(&mut encoder, r)?;
        }
        encode_account_events(&mut encoder, &self.events)?;
        if let Some(r) = self.reservations.lock().clone() {
            encode_reservations(&mut encoder, &r)?;
        }
        if let Some(o) = self.overload.lock().clone() {
            super::overload_gauges::encode_overload(&mut encoder, &o)?;
        }
        encode_debts(&mut encoder, &self.debts)?;
        encode_top_keys(&mut encoder, &self.top)
    }
}

/// Keys in debt now and their debt, per limit that had some.
fn encode_debts(
    encoder: &mut DescriptorEncoder,
    debts: &super::debts::Debts,
) -> Result<(), std::fmt::Error> {
    let now = debts.at(std::time::Instant::now());
    if now.is_empty() {
        return Ok(());
    }
    let series = |f: fn(&super::debts::InDebt) -> u64| -> Vec<(Vec<(String, String)>, i64)> {
        now.iter()
            .map(|(limit, d)| {
                let labels = vec![("limit".to_owned(), limit.to_string())];
                (labels, i64::try_from(f(d)).unwrap_or(i64::MAX))
            })
            .collect()
    };
    gauge(
        encoder,
        "sluice_keys_in_debt",
        "Keys this instance's settlements put into debt that are in debt still, by limit",
        &series(|d| d.keys),
    )?;
    gauge(
        encoder,
        "sluice_debt",
        "Debt of the keys in debt, in units of cost, by limit (estimated: paid off evenly at the limit's rate)",
        &series(|d| d.units),
    )
}

/// Reloads by result, what they removed, and the config in force.
fn encode_reloads(encoder: &mut DescriptorEncoder, r: &Reloader) -> Result<(), std::fmt::Error> {
    counter(
        encoder,
        "sluice_config_reloads",
        "Config reloads, by result",
        &[
            (&[("result", "success")], r.succeeded()),
            (&[("result", "failure")], r.failed()),
        ],
    )?;
    let (limits, plans) = r.removed();
    counter(
        encoder,
        "sluice_config_removed",
        "Limits and plans that config reloads removed",
        &[(&[("kind", "limit")], limits), (&[("kind", "plan")], plans)],
    )?;
    gauge(
        encoder,
        "sluice_config_info",
        "The config in force, by the hash of its text",
        &[(vec![("version".to_owned(), r.version())], 1)],
    )
}

/// Open reservations, and those that expired unsettled.
fn encode_reservations(
    encoder: &mut DescriptorEncoder,
    r: &crate::reservations::Reservations,
) -> Result<(), std::fmt::Error> {
    let (open, expired) = r.counts();
    gauge(
        encoder,
        "sluice_reservations_open",
        "Reservations of /v1/check not yet settled or expired",
        &[(Vec::new(), i64::try_from(open).unwrap_or(i64::MAX))],
    )?;
    counter(
        encoder,
        "sluice_reservations_expired",
        "Reservations of /v1/check never settled: they stand at their estimate",
        &[(&[], expired)],
    )
}

/// Account-manager events, by what became of them.
fn encode_account_events(
    encoder: &mut DescriptorEncoder,
    events: &AccountEvents,
) -> Result<(), std::fmt::Error> {
    let e = events.counters();
    let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
    counter(
        encoder,
        "sluice_account_events",
        "Account-manager events (a key over its plan's alert threshold), by what became of them",
        &[
            (&[("result", "emitted")], load(&e.emitted)),
            (&[("result", "delivered")], load(&e.delivered)),
            (&[("result", "failed")], load(&e.failed)),
            (&[("result", "dropped")], load(&e.dropped)),
        ],
    )
}

/// The [`TOP_KEYS`] most-limited keys, by rank.
fn encode_top_keys(encoder: &mut DescriptorEncoder, top: &TopKeys) -> Result<(), std::fmt::Error> {
    let top: Vec<(Vec<(String, String)>, i64)> = top
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
        encoder,
        "sluice_top_limited_key_requests",
        "The most-limited keys (keyed-hash prefixes) and their recent refusals, halved every minute",
        &top,
    )
}
