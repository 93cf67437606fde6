//! The live status page at `GET /` on `control_listen`, and the small JSON
//! it polls, `GET /v1/status`.
//!
//! The page is one HTML file compiled into the binary (`assets/status.html`,
//! with its script and styles inline): nothing loads from the internet. It
//! polls `/v1/status` every two seconds and draws allowed and limited
//! requests per second from the difference between two polls, so the server
//! keeps no history for it and a page left open costs one small JSON answer
//! every two seconds.

use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::Extension;
use axum::response::{Html, IntoResponse, Response};
use serde::Serialize;
use sluice_policy::Engine;

use crate::metrics::{Metrics, RequestOutcome, TOP_KEYS};

/// The page.
pub const STATUS_HTML: &str = include_str!("../assets/status.html");

/// What the page shows, polled.
#[derive(Debug, Serialize)]
pub struct Status {
    /// Seconds since the server started.
    pub uptime_s: f64,
    /// The config's version (a hash of its text), if known.
    pub config_version: Option<String>,
    /// Requests so far: allowed.
    pub allowed: u64,
    /// Requests so far: refused by a limit.
    pub limited: u64,
    /// Requests so far: refused otherwise (401, 403, 400, 503).
    pub other: u64,
    /// The store.
    pub store: StoreStatus,
    /// The most-limited keys (keyed-hash prefixes) and their recent counts.
    pub top_keys: Vec<(String, u64)>,
    /// How many limits the config has.
    pub limits: usize,
    /// Overload protection: the limit, in flight, and each class's
    /// admitted and shed requests; `null` while it is off.
    pub overload: Option<crate::overload::OverloadSnapshot>,
    /// Costs settled after the response and concurrency slots: per limit,
    /// and the reservations of `/v1/check`.
    pub settlements: SettlementStatus,
}

/// Settlements, slots and reservations, for the status page.
#[derive(Debug, Serialize)]
pub struct SettlementStatus {
    /// `/v1/check` reservations open now.
    pub reservations_open: usize,
    /// `/v1/check` reservations that expired unsettled.
    pub reservations_expired: u64,
    /// Milliseconds until the next reservation expires, if any is open.
    pub next_expiry_ms: Option<u64>,
    /// Settlements that came after their reservation had expired (409).
    pub settled_late: u64,
    /// Settlements for ids never issued, or forgotten (404).
    pub settled_unknown: u64,
    /// Second settlements of one reservation (409).
    pub settled_twice: u64,
    /// Per limit that settled or holds slots.
    pub limits: std::collections::BTreeMap<String, crate::metrics::LimitSettlements>,
}

/// The store's health.
#[derive(Debug, Serialize)]
pub struct StoreStatus {
    /// `memory` or `redis`.
    pub kind: &'static str,
    /// `closed` (healthy), `open` (the fallback decides) or `half_open`.
    pub breaker: &'static str,
    /// Decisions the fallback made.
    pub fallback_decisions: u64,
    /// Failed and timed-out calls.
    pub errors: u64,
}

/// What the status routes need.
#[derive(Debug, Clone)]
pub struct StatusState {
    /// The engine.
    pub engine: Arc<Engine>,
    /// The metrics.
    pub metrics: Arc<Metrics>,
    /// The reloader, which knows the config's version.
    pub reloader: Option<Arc<crate::reload::Reloader>>,
    /// When the server started.
    pub started: Instant,
}

/// `GET /`.
pub async fn page() -> Response {
    (
        [
            (http::header::CACHE_CONTROL, "no-cache"),
            (
                http::header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:",
            ),
        ],
        Html(STATUS_HTML),
    )
        .into_response()
}

/// `GET /v1/status`.
pub async fn status(Extension(state): Extension<StatusState>) -> Json<Status> {
    let m = &state.metrics;
    let other = [
        RequestOutcome::denied,
        RequestOutcome::missing_key,
        RequestOutcome::invalid,
        RequestOutcome::store_unavailable,
    ]
    .into_iter()
    .map(|o| m.requests(o))
    .sum();
    let kind = state.engine.store().kind();
    let store = match state.engine.remote_health() {
        None => StoreStatus {
            kind,
            breaker: "closed",
            fallback_decisions: 0,
            errors: 0,
        },
        Some(h) => StoreStatus {
            kind,
            breaker: h.breaker.name(),
            fallback_decisions: h.fallback_decisions,
            errors: h.store_errors + h.store_timeouts,
        },
    };
    Json(Status {
        uptime_s: state.started.elapsed().as_secs_f64(),
        config_version: state.reloader.as_ref().map(|r| r.version()),
        allowed: m.requests(RequestOutcome::allowed),
        limited: m.requests(RequestOutcome::limited),
        other,
        store,
        top_keys: m
            .top_keys(TOP_KEYS)
            .iter()
            .map(|k| (k.label(), k.count))
            .collect(),
        limits: state.engine.policy().limits().len(),
        overload: m.overload(),
        settlements: m.settlement_status(),
    })
}
