//! The reference server's HTTP API, for clients that cannot speak gRPC (a
//! Lua script, a health checker):
//!
//! - `/json` (any method): a `RateLimitRequest` in JSON (see
//!   [`json_api`](crate::json_api)) is decided as `ShouldRateLimit` is, and
//!   answered in JSON: `200` when the overall code is `OK`, `429` when it
//!   is `OVER_LIMIT`, `500` when it is `UNKNOWN`; a body that is not a
//!   request, or a request the service refuses (no domain, no
//!   descriptor), `400 Bad Request`. A body over
//!   [`MAX_MESSAGE_BYTES`] is not read (`400`).
//! - `/healthcheck`: `200 OK` while the server is healthy, `500` with no
//!   body while not; what healthy means is the caller's ([`Healthy`]).

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use http::{HeaderValue, StatusCode, header};

use crate::answer::EnvoyRls;
use crate::json_api::{request_from_json, response_to_json};
use crate::request::MAX_MESSAGE_BYTES;

/// Whether the server is healthy now (see the module docs).
pub type Healthy = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Clone)]
struct Api {
    service: Arc<EnvoyRls>,
    healthy: Healthy,
}

/// The HTTP API over `service`, with `healthy` behind `/healthcheck`.
pub fn router(service: Arc<EnvoyRls>, healthy: Healthy) -> Router {
    Router::new()
        .route("/json", any(json))
        .route("/healthcheck", any(healthcheck))
        .layer(DefaultBodyLimit::max(MAX_MESSAGE_BYTES))
        .with_state(Api { service, healthy })
}

/// A status and its reason phrase, as Go's `http.Error` writes them.
fn plain_error(status: StatusCode) -> Response {
    let text = format!("{}\n", status.canonical_reason().unwrap_or("Error"));
    (
        status,
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            ),
            (
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            ),
        ],
        text,
    )
        .into_response()
}

async fn json(
    State(api): State<Api>,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Response {
    let Ok(body) = body else {
        return plain_error(StatusCode::BAD_REQUEST);
    };
    let req = match request_from_json(&body) {
        Ok(req) => req,
        Err(e) => {
            tracing::debug!(error = %e, "/json: not a RateLimitRequest");
            return plain_error(StatusCode::BAD_REQUEST);
        }
    };
    let answer = match api.service.decide(&req).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::debug!(error = %e, "/json: ShouldRateLimit refused: invalid request");
            return plain_error(StatusCode::BAD_REQUEST);
        }
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
    let status = match Code::try_from(answer.overall_code) {
        Ok(Code::Ok) => StatusCode::OK,
        Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
        Ok(Code::Unknown) | Err(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let body = response_to_json(&answer).to_string();
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

async fn healthcheck(State(api): State<Api>) -> Response {
    if (api.healthy)() {
        (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            )],
            "OK",
        )
            .into_response()
    } else {
        Response::builder()
            .status(StatusCode::INTERNAL_SERVER_ERROR)
            .body(Body::empty())
            .unwrap_or_default()
    }
}
