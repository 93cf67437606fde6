//! The store's metrics at scrape time: which store the limits live in and,
//! for Redis, its fallback, errors, over-limit cache, owed cost, circuit
//! breaker and its nodes' eviction (`eviction_gauges`).

use prometheus_client::encoding::DescriptorEncoder;
use sluice_store::seam::{BreakerState, RemoteHealth};

use super::const_series::{counter, gauge};
use super::eviction_gauges::encode_eviction;

/// `sluice_store_info` (the store says what it is), then, for a store
/// over the network (`health`), its health.
pub(super) fn encode_store(
    encoder: &mut DescriptorEncoder,
    store: &str,
    health: Option<&RemoteHealth>,
) -> Result<(), std::fmt::Error> {
    gauge(
        encoder,
        "sluice_store_info",
        "The store the limits live in",
        &[(vec![("store".to_owned(), store.to_owned())], 1)],
    )?;
    if let Some(health) = health {
        encode_remote(encoder, health)?;
        encode_eviction(encoder, &health.nodes)?;
    }
    Ok(())
}

/// Redis's health: the fallback's decisions, failed calls, cache hits, the
/// outage's cost owed and settled, and the breaker.
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
    encode_owed(encoder, h)?;
    encode_breaker(encoder, h.breaker)
}

/// The cost the fallback admitted during an outage: settled, unrecorded,
/// and still owed.
fn encode_owed(encoder: &mut DescriptorEncoder, h: &RemoteHealth) -> Result<(), std::fmt::Error> {
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
    )
}

/// `sluice_store_breaker_state`: 0 closed, 1 open, 2 half-open.
fn encode_breaker(
    encoder: &mut DescriptorEncoder,
    breaker: BreakerState,
) -> Result<(), std::fmt::Error> {
    let state = match breaker {
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
