//! The data plane: every path of `listen`.
//!
//! It is the [tower middleware](crate::layer) around one handler: a refusal
//! is a 429 (or a 401 when a limit's key is missing) and never reaches the
//! handler; an admitted request is held for its smoothing delay, if any
//! (without holding a thread), then forwarded to the upstream, or answered
//! with a small JSON of the decision when there is none. Every limited
//! response carries the rate-limit fields. The proxy answers `CONNECT`
//! with 405: it opens no tunnels.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::handler::Handler;
use axum::response::{IntoResponse, Response};
use http::{Request, StatusCode};
use sluice_policy::{Engine, Verdict};
use tower_layer::Layer;

use crate::edge::Edge;
use crate::layer::RateLimitLayer;
use crate::metrics::Metrics;
use crate::overload::Overload;
use crate::overload_layer::OverloadLayer;
use crate::problem::Problem;
use crate::proxy::{Proxy, ProxyError};
use crate::verdict_json::VerdictJson;

/// The data plane's router: the rate-limit layer around the echo or the
/// reverse proxy; around the proxy, overload protection inside the rate
/// limits (a pass-through while `[overload]` is off).
pub fn router(engine: Arc<Engine>, proxy: Option<Proxy>, metrics: Arc<Metrics>) -> Router {
    let proxied = proxy.is_some();
    let reads = engine.clone();
    let limits = RateLimitLayer::new(engine.clone()).with_metrics(metrics.clone());
    // The echo answers with the verdict; the proxy does not read it, and
    // putting it in the extensions costs an allocation a request.
    let limits = if proxied {
        limits
    } else {
        limits.with_verdict()
    };
    match proxy {
        // Overload protection (off until `[overload]` says otherwise, a
        // reload included) inside the rate limits: only the requests they
        // admitted enter its gate.
        Some(proxy) => {
            let overload = Arc::new(Overload::new(engine));
            metrics.watch_overload(overload.clone());
            // Behind an `Arc`: the stack is cloned for every request, and
            // the proxy's client is several.
            let forward = forward.with_state(Arc::new(proxy));
            let inner = OverloadLayer::from_shared(overload).layer(forward);
            at_the_edge_of(inner, limits, reads, proxied)
        }
        None => at_the_edge_of(echo.with_state(()), limits, reads, proxied),
    }
}

/// The router of `inner` behind the limits, outermost first: what every
/// request meets at the edge, and the body's fields where a rule reads
/// them ([`Edge`]), then `limits`. One stack under the router's fallback,
/// which clones it once a request: layered route by route
/// (`Router::layer`), each layer was a route of its own, cloned and boxed
/// for every request.
fn at_the_edge_of<S>(inner: S, limits: RateLimitLayer, reads: Arc<Engine>, proxied: bool) -> Router
where
    S: tower_service::Service<Request<Body>, Response = Response, Error = std::convert::Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    Router::new().fallback_service(Edge::new(limits.layer(inner), reads, proxied))
}

/// The verdict as JSON (read in place: the layer puts it there).
async fn echo(req: Request<Body>) -> Response {
    match req.extensions().get::<Verdict>() {
        Some(verdict) => VerdictJson::new(verdict).into_response(),
        None => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

async fn forward(State(proxy): State<Arc<Proxy>>, req: Request<Body>) -> Response {
    if req.method() == http::Method::CONNECT {
        return no_tunnel();
    }
    let e = match proxy.forward(req).await {
        Ok(r) => return r,
        Err(e) => e,
    };
    let (status, detail) = match &e {
        ProxyError::BadBody(_) => (StatusCode::BAD_REQUEST, "The request body is malformed."),
        ProxyError::Timeout => (
            StatusCode::GATEWAY_TIMEOUT,
            "The upstream service did not answer in time.",
        ),
        ProxyError::Busy => (
            StatusCode::SERVICE_UNAVAILABLE,
            "Too many requests are waiting on the upstream service; retry in a moment.",
        ),
        ProxyError::Uri(_) | ProxyError::Upstream(_) => (
            StatusCode::BAD_GATEWAY,
            "The upstream service could not be reached.",
        ),
    };
    match &e {
        ProxyError::BadBody(_) => tracing::debug!(error = %e, "malformed request body"),
        _ => tracing::warn!(error = %e, "upstream failed"),
    }
    let mut problem = Problem::new(status, detail);
    let busy = matches!(e, ProxyError::Busy);
    if busy {
        problem.retry_after = Some(1);
    }
    let mut response = problem.into_response();
    if busy {
        response.headers_mut().insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("1"),
        );
    }
    response
}

/// `CONNECT` asks for a tunnel, which the proxy does not open: 405.
fn no_tunnel() -> Response {
    let mut r = Problem::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "CONNECT is not supported: this proxy opens no tunnels.",
    )
    .into_response();
    r.headers_mut().insert(
        http::header::ALLOW,
        http::HeaderValue::from_static("GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
    );
    r
}
