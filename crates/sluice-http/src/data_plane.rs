//! The data plane: every path of `listen`.
//!
//! It is the [tower middleware](crate::layer) around one handler: a refusal
//! is a 429 (or a 401 when a limit's key is missing) and never reaches the
//! handler; an admitted request is held for its smoothing delay, if any
//! (without holding a thread), then forwarded to the upstream, or answered
//! with a small JSON of the decision when there is none. Every limited
//! response carries the rate-limit fields.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use http::{Request, StatusCode};
use sluice_policy::{Engine, Verdict};

use crate::layer::RateLimitLayer;
use crate::metrics::Metrics;
use crate::problem::Problem;
use crate::proxy::Proxy;
use crate::verdict_json::VerdictJson;

/// The data plane's router: the rate-limit layer around the echo or the
/// reverse proxy.
pub fn router(engine: Arc<Engine>, proxy: Option<Proxy>, metrics: Arc<Metrics>) -> Router {
    let inner = match proxy {
        Some(proxy) => Router::new().fallback(forward).with_state(proxy),
        None => Router::new().fallback(echo),
    };
    inner.layer(
        RateLimitLayer::new(engine)
            .with_metrics(metrics)
            .with_verdict(),
    )
}

/// The verdict as JSON (read in place: the layer puts it there).
async fn echo(req: Request<Body>) -> Response {
    match req.extensions().get::<Verdict>() {
        Some(verdict) => Json(VerdictJson::new(verdict)).into_response(),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn forward(State(proxy): State<Proxy>, req: Request<Body>) -> Response {
    match proxy.forward(req).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "upstream unreachable");
            Problem::new(
                StatusCode::BAD_GATEWAY,
                "The upstream service could not be reached.",
            )
            .into_response()
        }
    }
}
