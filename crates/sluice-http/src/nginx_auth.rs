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
//!   `Sluice-Problem`.
//!
//! The client address is the connecting peer (nginx), unless nginx is a
//! trusted proxy: then it is read from `X-Forwarded-For` as everywhere else.
//! See `deploy/nginx/auth_request.conf`.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Extension, State};
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use sluice_policy::{Engine, RequestInfo};

use crate::headers::add_headers;
use crate::problem::Problem;
use crate::verdict_json::{decide_error, refusal};

/// `Sluice-Problem`: the refusal's problem+json, for nginx to send on.
pub const SLUICE_PROBLEM: HeaderName = HeaderName::from_static("sluice-problem");

/// The handler of `GET /v1/auth`.
pub async fn auth(
    State(engine): State<Arc<Engine>>,
    Extension(metrics): Extension<Arc<crate::metrics::Metrics>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
) -> Response {
    let method = headers
        .get("x-original-method")
        .and_then(|v| Method::from_bytes(v.as_bytes()).ok())
        .unwrap_or(Method::GET);
    let Some(uri) = headers.get("x-original-uri").and_then(|v| v.to_str().ok()) else {
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
            headers: &headers,
            peer: Some(peer.ip()),
            cost: None,
        })
        .await;
    metrics.record_result(&decided);
    let verdict = match decided {
        Ok(v) => v,
        Err(e) => return with_problem_field(decide_error(&e)),
    };
    if verdict.allowed {
        let mut response = StatusCode::NO_CONTENT.into_response();
        add_headers(&verdict, response.headers_mut());
        return response;
    }
    let mut response = with_problem_field(refusal(&verdict));
    *response.status_mut() = StatusCode::FORBIDDEN;
    add_headers(&verdict, response.headers_mut());
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
