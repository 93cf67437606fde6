//! `GET /v1/auth`: the decision endpoint for nginx's `auth_request`.
//!
//! nginx sends one subrequest per client request, with the client's header
//! fields, and the original method and URI in `X-Original-Method` and
//! `X-Original-URI`. nginx treats a 2xx answer as "allow", passes 401 and
//! 403 on, and turns **any other status into a 500** — a 429 included. So
//! this endpoint answers:
//!
//! - `204` to allow, with the `RateLimit-Policy`/`RateLimit` fields;
//! - `403` to refuse, with the same fields, `Retry-After`, and the
//!   problem+json body also in a `Sluice-Problem` field, so that nginx
//!   (`error_page 403 =429`) can send the client a proper 429;
//! - `401` when a limit's key is missing, its problem also in
//!   `Sluice-Problem`;
//! - `403` too for a request refused before any limit because the client
//!   sent it ambiguous or malformed (two API keys, forwarding fields that
//!   name different clients, an encoded `/` in the path): its problem says
//!   `400`. Answered `400`, nginx would turn it into a 500 that any client
//!   could cause at will.
//!
//! Every `403` carries `Sluice-Status`, the status Sluice means (`429`,
//! `400`, `403` for a denied client, `503` for the `deny` fallback), so
//! that nginx can pick the one it answers with. Sluice's own faults stay
//! `500`.
//!
//! The client address is the connecting peer (nginx), unless nginx is a
//! trusted proxy: then it is read from `X-Forwarded-For` as everywhere else.
//! See `deploy/nginx/auth_request.conf`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderName, HeaderValue, Method, StatusCode};
use sluice_policy::{Engine, RequestInfo};

use crate::headers::add_headers;
use crate::problem::Problem;
use crate::verdict_json::{decide_error, refusal};

/// `Sluice-Problem`: the refusal's problem+json, for nginx to send on.
pub const SLUICE_PROBLEM: HeaderName = HeaderName::from_static("sluice-problem");

/// `Sluice-Status`: on a `403`, the status Sluice means, for nginx to
/// answer with.
pub const SLUICE_STATUS: HeaderName = HeaderName::from_static("sluice-status");

/// `X-Original-Method`: the client request's method, set by nginx's config.
const X_ORIGINAL_METHOD: HeaderName = HeaderName::from_static("x-original-method");

/// `X-Original-URI`: the client request's URI, set by nginx's config.
const X_ORIGINAL_URI: HeaderName = HeaderName::from_static("x-original-uri");

/// The handler of `GET /v1/auth`. It takes the subrequest whole: its
/// header fields are read where they are, not copied.
pub async fn auth(
    State(engine): State<Arc<Engine>>,
    State(metrics): State<Arc<crate::metrics::Metrics>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
) -> Response {
    let headers = request.headers();
    let method = headers
        .get(X_ORIGINAL_METHOD)
        .and_then(|v| Method::from_bytes(v.as_bytes()).ok())
        .unwrap_or(Method::GET);
    let Some(uri) = headers.get(X_ORIGINAL_URI).and_then(|v| v.to_str().ok()) else {
        tracing::warn!("/v1/auth without X-Original-URI: check the nginx config");
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "X-Original-URI is missing: set `proxy_set_header X-Original-URI $request_uri;`",
        )
        .into_response();
    };
    let path = uri.split('?').next().unwrap_or("/");
    let decided = engine
        .decide(&RequestInfo {
            method: &method,
            path,
            headers,
            peer: Some(peer.ip()),
            cost: None,
            body: None,
        })
        .await;
    metrics.record_result(&decided);
    let verdict = match decided {
        Ok(v) => v,
        Err(e) => {
            let problem = decide_error(&e);
            // nginx passes a 401 on; a 500 is Sluice's own fault, and
            // nginx's 500 says so truly.
            return if problem.status == 401 || problem.status >= 500 {
                with_problem_field(problem)
            } else {
                forbidden(problem)
            };
        }
    };
    if verdict.allowed {
        // A delayed request (`on_limit = "delay"`, or a leaky bucket) is
        // held here: nginx waits for the subrequest before proxying.
        let delay = verdict.delay();
        if delay > 0 {
            tokio::time::sleep(std::time::Duration::from_nanos(delay)).await;
        }
        let mut response = StatusCode::NO_CONTENT.into_response();
        add_headers(&verdict, response.headers_mut());
        return response;
    }
    let mut response = forbidden(refusal(&verdict));
    add_headers(&verdict, response.headers_mut());
    response
}

/// The problem as a `403`, which nginx passes on, with the status meant
/// in `Sluice-Status`.
fn forbidden(problem: Problem) -> Response {
    let meant = problem.status;
    let mut response = with_problem_field(problem);
    *response.status_mut() = StatusCode::FORBIDDEN;
    response
        .headers_mut()
        .insert(SLUICE_STATUS, HeaderValue::from(meant));
    response
}

/// The problem as a response, with its JSON also in `Sluice-Problem` (nginx
/// drops the subrequest's body, but can copy a header field).
fn with_problem_field(problem: Problem) -> Response {
    let json = serde_json::to_string(&problem).unwrap_or_default();
    let mut response = problem.into_response();
    if let Ok(v) = HeaderValue::from_str(&json) {
        response.headers_mut().insert(SLUICE_PROBLEM, v);
    }
    response
}
