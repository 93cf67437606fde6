//! The data plane: every path of `listen`.
//!
//! Each request is decided by the engine. A refusal is a 429 (or a 401 when a
//! limit's key is missing) and never reaches the upstream. An admitted request
//! is held for its smoothing delay, if any (without holding a thread), then
//! forwarded to the upstream, or answered with a small JSON of the decision
//! when there is none. Every limited response carries the rate-limit fields.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use http::{Request, StatusCode};
use sluice_policy::{Engine, RequestInfo};

use crate::problem::Problem;
use crate::proxy::Proxy;
use crate::verdict_json::{VerdictJson, allowed_headers, decide_error_response, refusal_response};

/// What the data plane needs.
#[derive(Debug, Clone)]
pub struct DataPlane {
    /// The decision engine.
    pub engine: Arc<Engine>,
    /// The upstream, when Sluice is a reverse proxy.
    pub proxy: Option<Proxy>,
}

/// The data plane's router: one handler for every path.
pub fn router(state: DataPlane) -> axum::Router {
    axum::Router::new().fallback(handle).with_state(state)
}

async fn handle(
    State(dp): State<DataPlane>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request<Body>,
) -> Response {
    let policy = dp.engine.policy().clone();
    let style = policy.headers;
    let decided = dp.engine.decide(&RequestInfo {
        method: req.method(),
        path: req.uri().path(),
        headers: req.headers(),
        peer: Some(peer.ip()),
        cost: None,
    });
    let verdict = match decided {
        Err(e) => return decide_error_response(&e),
        Ok(v) if !v.allowed => return refusal_response(&v, style),
        Ok(v) => v,
    };
    let delay = verdict.delay();
    if delay > 0 {
        tokio::time::sleep(Duration::from_nanos(delay)).await;
    }
    let mut response = match &dp.proxy {
        None => Json(VerdictJson::new(&verdict)).into_response(),
        Some(proxy) => match proxy.forward(req).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "upstream unreachable");
                Problem::new(
                    StatusCode::BAD_GATEWAY,
                    "The upstream service could not be reached.",
                )
                .into_response()
            }
        },
    };
    for (name, value) in &allowed_headers(&verdict, style) {
        response.headers_mut().insert(name, value.clone());
    }
    response
}
