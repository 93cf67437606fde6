//! A verdict as JSON and as an HTTP response, shared by the data plane and
//! the control API.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::Serialize;
use sluice_policy::{DecideError, LimitResult, Outcome, Verdict};

use crate::headers::{add_headers, retry_after_secs};
use crate::problem::{Problem, QUOTA_EXCEEDED, STORE_UNAVAILABLE, problem_response};

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
    quota_problem(verdict.violated().next(), violated, retry)
}

/// The problem of a refusal for quota: the `violated` limits' names, the
/// `first` of them described, and the seconds until a `retry`.
fn quota_problem(first: Option<&LimitResult>, violated: Vec<String>, retry: u64) -> Problem {
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
    let mut response = match kept_refusal(verdict) {
        Some(body) => problem_response(StatusCode::TOO_MANY_REQUESTS, body),
        None => refusal(verdict).into_response(),
    };
    add_headers(verdict, response.headers_mut());
    response
}

/// The body of a refusal by one limit, [`refusal`]'s to the byte, from the
/// pieces kept with the limit ([`HeaderItems::refusal`]): everything but
/// the retry time, which the body holds twice, depends on the limit's
/// definition alone. Serializing the problem and formatting its detail
/// were a quarter of a refused request's cost through the proxy, which a
/// flood of one client's refused requests pays on every one. `None` for
/// any other refusal (several limits, the store's fallback), which
/// [`refusal`] answers.
///
/// [`HeaderItems::refusal`]: sluice_policy::HeaderItems::refusal
fn kept_refusal(verdict: &Verdict) -> Option<Vec<u8>> {
    if Outcome::of_verdict(verdict) != Outcome::Limited {
        return None;
    }
    let mut violated = verdict.violated();
    let (r, None) = (violated.next()?, violated.next()) else {
        return None;
    };
    let pieces = r
        .labels
        .header_items
        .refusal(&r.spec, || refusal_pieces(r))?;
    let mut retry = itoa::Buffer::new();
    let retry = retry
        .format(retry_after_secs(verdict.retry_after().unwrap_or(0)))
        .as_bytes();
    let [a, b, c] = pieces;
    let mut body = Vec::with_capacity(a.len() + b.len() + c.len() + 2 * retry.len());
    for piece in [a.as_bytes(), retry, b.as_bytes(), retry, c.as_bytes()] {
        body.extend_from_slice(piece);
    }
    Some(body)
}

/// A retry time no refusal has ([`retry_after_secs`] stops near 2^34),
/// where the pieces of a limit's refusal body are cut.
const RETRY_MARK: u64 = u64::MAX;

/// The body of a refusal by `r` alone, cut where its retry time goes:
/// `None` if the mark is not found exactly twice (a limit whose name holds
/// it), and such a limit's refusals are made whole each time.
fn refusal_pieces(r: &LimitResult) -> Option<[Box<str>; 3]> {
    let problem = quota_problem(Some(r), vec![r.name().to_owned()], RETRY_MARK);
    let body = serde_json::to_string(&problem).ok()?;
    let mut pieces = body.split(RETRY_MARK_TEXT);
    let cut = [
        pieces.next()?.into(),
        pieces.next()?.into(),
        pieces.next()?.into(),
    ];
    pieces.next().is_none().then_some(cut)
}

/// [`RETRY_MARK`] as text.
const RETRY_MARK_TEXT: &str = "18446744073709551615";

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

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, Decision, LimitSpec, Rate};
    use sluice_policy::{HeadersConfig, LimitLabels};

    fn refused(name: &str, algorithm: AlgorithmKind, retry_ns: u64) -> Verdict {
        let result = LimitResult {
            spec: LimitSpec {
                algorithm,
                rate: Rate::new(5, 2_000_000_000).unwrap(),
                burst: 3,
                nodelay: false,
            },
            decision: Decision {
                allowed: false,
                limit: 3,
                remaining: 0,
                reset_after: retry_ns,
                retry_after: Some(retry_ns),
                delay: 0,
            },
            labels: LimitLabels::named(name.into(), "*"),
            key: sluice_store::KeyId(0),
        };
        Verdict {
            allowed: false,
            results: vec![result].into(),
            shadow: Default::default(),
            style: HeadersConfig::default(),
            fallback: None,
        }
    }

    #[test]
    fn the_mark_is_its_text() {
        assert_eq!(RETRY_MARK.to_string(), RETRY_MARK_TEXT);
    }

    /// The body made from the kept pieces is the problem serialized, byte
    /// for byte, whatever the limit's name holds, for each retry time.
    #[test]
    fn a_kept_refusal_is_the_serialized_problem() {
        let names = [
            "per-key",
            "a \"quoted\" \\ name",
            "caf\u{e9} \u{1f600}",
            "tab\there",
        ];
        for name in names {
            for algorithm in [AlgorithmKind::Gcra, AlgorithmKind::Concurrency] {
                for retry_ns in [1, 999_999_999, 1_000_000_001, 86_400_000_000_000] {
                    let v = refused(name, algorithm, retry_ns);
                    let whole = serde_json::to_vec(&refusal(&v)).unwrap();
                    // Made once, then kept: both bodies are checked.
                    for _ in 0..2 {
                        let kept = kept_refusal(&v).expect("one limit refused");
                        assert_eq!(
                            String::from_utf8(kept).unwrap(),
                            String::from_utf8(whole.clone()).unwrap()
                        );
                    }
                }
            }
        }
    }

    /// A name that holds the mark cannot be cut there: its refusals are
    /// made whole.
    #[test]
    fn a_name_holding_the_mark_is_made_whole() {
        let v = refused(&format!("limit-{RETRY_MARK_TEXT}"), AlgorithmKind::Gcra, 5);
        assert!(kept_refusal(&v).is_none());
        let response = refusal_response(&v);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
}
