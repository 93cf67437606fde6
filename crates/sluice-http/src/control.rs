//! The control API on `control_listen`.
//!
//! - `POST /v1/check`: a JSON description of a request in, the decision out,
//!   with status 200 (allowed) or 429 (refused) and the same header fields
//!   the data plane sends, so that services in any language can ask.
//! - `GET /v1/auth`: the same decision for nginx's `auth_request`
//!   (see [`nginx_auth`](crate::nginx_auth)).
//! - `GET /healthz`: the process is up.
//! - `GET /readyz`: the process is ready to decide.
//! - `GET /metrics`: Prometheus metrics (see [`metrics`](crate::metrics)).
//! - `GET /`: the live [status page](crate::status_page), polling
//!   `GET /v1/status`.
//!
//! The request body of `/v1/check`:
//!
//! ```json
//! {"method": "GET", "path": "/export/1", "headers": {"X-Api-Key": "alice"},
//!  "client_ip": "192.0.2.7", "cost": 1}
//! ```
//!
//! All fields are optional except `path`. `client_ip` is the address the
//! described request came from; trusted-proxy rules then apply to it and to
//! its `X-Forwarded-For`. `cost`, when given, replaces every matched limit's
//! configured cost.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use sluice_policy::{Engine, RequestInfo};

use crate::headers::add_headers;
use crate::metrics::Metrics;
use crate::problem::Problem;
use crate::status_page::StatusState;
use crate::verdict_json::{VerdictJson, decide_error_response};

/// The body of `POST /v1/check`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    /// The HTTP method; `GET` by default.
    #[serde(default = "default_method")]
    pub method: String,
    /// The path (a query, if any, is ignored).
    pub path: String,
    /// Request header fields.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The address the request came from.
    pub client_ip: Option<IpAddr>,
    /// A cost that replaces each matched limit's configured cost.
    pub cost: Option<u64>,
}

fn default_method() -> String {
    "GET".into()
}

/// The control API's router.
pub fn router(engine: Arc<Engine>, metrics: Arc<Metrics>) -> axum::Router {
    router_with(engine, metrics, None)
}

/// The control API's router, with the reloader that knows the config's
/// version (shown on the status page).
pub fn router_with(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    reloader: Option<Arc<crate::reload::Reloader>>,
) -> axum::Router {
    let status = StatusState {
        engine: engine.clone(),
        metrics: metrics.clone(),
        reloader,
        started: std::time::Instant::now(),
    };
    axum::Router::new()
        .route("/", get(crate::status_page::page))
        .route("/v1/status", get(crate::status_page::status))
        .layer(Extension(status))
        .route("/v1/check", post(check))
        .route("/v1/auth", get(crate::nginx_auth::auth))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .layer(Extension(metrics))
        .with_state(engine)
}

async fn serve_metrics(Extension(metrics): Extension<Arc<Metrics>>) -> Response {
    (
        [(
            http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        metrics.encode(),
    )
        .into_response()
}

async fn healthz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ok" }))
}

async fn readyz() -> impl IntoResponse {
    Json(serde_json::json!({ "status": "ready" }))
}

fn bad_request(detail: String) -> Response {
    Problem::new(StatusCode::BAD_REQUEST, detail).into_response()
}

async fn check(
    State(engine): State<Arc<Engine>>,
    Extension(metrics): Extension<Arc<Metrics>>,
    body: Bytes,
) -> Response {
    let req: CheckRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid check request: {e}")),
    };
    let Ok(method) = Method::from_bytes(req.method.to_ascii_uppercase().as_bytes()) else {
        return bad_request(format!("`{}` is not an HTTP method", req.method));
    };
    let mut headers = HeaderMap::new();
    for (name, value) in &req.headers {
        let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            return bad_request(format!("invalid header field `{name}`"));
        };
        headers.append(n, v);
    }
    let path = req.path.split('?').next().unwrap_or("/");
    let decided = engine
        .decide(&RequestInfo {
            method: &method,
            path,
            headers: &headers,
            peer: req.client_ip,
            cost: req.cost,
        })
        .await;
    metrics.record_result(&decided);
    let verdict = match decided {
        Ok(v) => v,
        Err(e) => return decide_error_response(&e),
    };
    let status = if verdict.allowed {
        StatusCode::OK
    } else {
        StatusCode::TOO_MANY_REQUESTS
    };
    let mut response = (status, Json(VerdictJson::new(&verdict))).into_response();
    add_headers(&verdict, response.headers_mut());
    response
}
