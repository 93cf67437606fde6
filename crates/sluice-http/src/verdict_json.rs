//! A verdict as JSON and as an HTTP response, shared by the data plane and
//! the control API.

use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluice_policy::{DecideError, LimitResult, Outcome, Verdict};

use crate::headers::{add_headers, retry_after_secs};
use crate::problem::{Problem, QUOTA_EXCEEDED, STORE_UNAVAILABLE};

/// One limit's decision, as JSON.
#[derive(Debug, Serialize)]
pub struct LimitJson<'a> {
    /// The limit's name.
    pub name: &'a str,
    /// Its algorithm.
    pub algorithm: &'static str,
    /// Its rate, as written in configs (none for a concurrency limit).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rate: Option<sluice_core::Rate>,
    /// Whether this limit allowed the request.
    pub allowed: bool,
    /// Its capacity (burst).
    pub limit: u64,
    /// Quota left after this request.
    pub remaining: u64,
    /// Milliseconds until fully replenished (rounded up).
    pub reset_after_ms: u64,
    /// Milliseconds until the request could pass (rounded up), if refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// A verdict, as JSON.
#[derive(Debug, Serialize)]
pub struct VerdictJson<'a> {
    /// Whether every limit allowed the request.
    pub allowed: bool,
    /// Milliseconds until the request could pass, if refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// Milliseconds an admitted request is held for smoothing (a leaky
    /// bucket, or an `on_limit = "delay"` limit).
    #[serde(skip_serializing_if = "is_zero")]
    pub delay_ms: u64,
    /// Each applied limit.
    pub limits: Vec<LimitJson<'a>>,
    /// `/v1/check`: the reservation to settle, where a limit settles its
    /// cost after the request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation: Option<crate::settle_api::ReservationJson>,
}

/// The body as `application/json`, with status 200 (a caller with another
/// sets it): written into one buffer sized for a verdict of a limit or
/// two, where axum's `Json` starts smaller and grows.
impl IntoResponse for VerdictJson<'_> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(256);
        // Strings, numbers and booleans into a `Vec`: nothing can fail.
        let _ = serde_json::to_writer(&mut body, &self);
        let mut response = Response::new(axum::body::Body::from(body));
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/json"),
        );
        response
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn ms(ns: u64) -> u64 {
    ns.div_ceil(1_000_000)
}

impl<'a> VerdictJson<'a> {
    /// The JSON view of a verdict.
    pub fn new(v: &'a Verdict) -> Self {
        Self {
            allowed: v.allowed,
            retry_after_ms: v.retry_after().map(ms),
            delay_ms: ms(v.delay()),
            limits: v.results.iter().map(limit_json).collect(),
            reservation: None,
        }
    }
}

fn limit_json(r: &LimitResult) -> LimitJson<'_> {
    LimitJson {
        name: r.name(),
        algorithm: r.spec.algorithm.name(),
        rate: (r.spec.algorithm != sluice_core::AlgorithmKind::Concurrency).then_some(r.spec.rate),
        allowed: r.decision.allowed,
        limit: r.decision.limit,
        remaining: r.decision.remaining,
        reset_after_ms: ms(r.decision.reset_after),
        retry_after_ms: r.decision.retry_after.map(ms),
    }
}

/// The problem body of a refusal: which limits refused, and when to retry.
pub fn refusal(verdict: &Verdict) -> Problem {
    let outcome = Outcome::of_verdict(verdict);
    if outcome == Outcome::StoreUnavailable {
        let retry = retry_after_secs(verdict.retry_after().unwrap_or(0));
        return Problem {
            kind: STORE_UNAVAILABLE.into(),
            title: "Service Unavailable".into(),
            status: outcome.http_status(),
            detail: format!(
                "The rate-limit store is unavailable and this service refuses requests until it is back (fallback `deny`); retry in {retry} s."
            ),
            violated_policies: Vec::new(),
            retry_after: Some(retry),
        };
    }
    let violated: Vec<String> = verdict.violated().map(|r| r.name().to_string()).collect();
    let retry = retry_after_secs(verdict.retry_after().unwrap_or(0));
    let first = verdict.violated().next();
    let detail = match first {
        Some(r) if r.spec.algorithm == sluice_core::AlgorithmKind::Concurrency => format!(
            "Concurrency limit `{}` reached: at most {} requests in flight; retry in {retry} s.",
            r.name(),
            r.spec.burst
        ),
        // The limit as configured ("10 per second, burst 20"), not as the
        // header fields' quota and window put it.
        Some(r) => format!(
            "Rate limit `{}` exceeded ({}, burst {}); retry in {retry} s.",
            r.name(),
            r.spec.rate.in_words(),
            r.spec.burst
        ),
        None => format!("Rate limit exceeded; retry in {retry} s."),
    };
    Problem {
        kind: QUOTA_EXCEEDED.into(),
        title: "Too Many Requests".into(),
        status: Outcome::Limited.http_status(),
        detail,
        violated_policies: violated,
        retry_after: Some(retry),
    }
}

/// The 429 response for a refusal, with every header.
pub fn refusal_response(verdict: &Verdict) -> Response {
    let mut response = refusal(verdict).into_response();
    add_headers(verdict, response.headers_mut());
    response
}

/// The problem for a request that could not be decided, with the engine's
/// status for it ([`Outcome::http_status`]: 401 for a missing key, 403 for
/// a denied client, 400 for a cost no limit could ever admit, a path with
/// no canonical form or an ambiguous host or client, 500 for Sluice's own fault, whose details go only to
/// the log).
pub fn decide_error(e: &DecideError) -> Problem {
    let status = Outcome::of_error(e).status_code();
    let detail = match e {
        DecideError::MissingKey(m) => format!("This API needs a key: {m}."),
        DecideError::Impossible { .. } => e.to_string(),
        DecideError::AmbiguousKey(a) => format!("{a}."),
        DecideError::Path(p) => format!("This request's path is refused: {p}."),
        DecideError::Host(h) => format!("This request's host is refused: {h}."),
        DecideError::Denied => "This client is denied access.".to_owned(),
        DecideError::Internal(why) => {
            tracing::error!(error = %why, "a request could not be decided");
            "This request could not be decided; the server logged why.".to_owned()
        }
    };
    Problem::new(status, detail)
}

/// The response for a request that could not be decided.
pub fn decide_error_response(e: &DecideError) -> Response {
    decide_error(e).into_response()
}
