//! Admin routes on `control_listen`:
//!
//! - `POST /admin/reload`: reload the config file;
//! - `PUT /admin/keys/{key}/plan` with `{"plan":"pro"}`: put a key on a plan
//!   now, over the config's assignment; `GET` reads a key's plan and where it
//!   comes from (`runtime`, `config` or `default`); `DELETE` removes the
//!   runtime assignment;
//! - `PUT /admin/keys/{key}/credits` with `{"credits": 100}`: set a key's
//!   burst credits (extra cost its plan admits once its bucket is empty);
//!   `GET` reads the balance;
//!
//!   with a Redis store, plan and credit changes are written to Redis first
//!   (503 if it does not take them: nothing changed) and every instance
//!   applies them within a poll;
//! - `POST /admin/keys/save`: write the runtime assignments to
//!   `[client] runtime_keys_file` (atomically: a temporary file renamed
//!   over it); they are loaded from it at the next start.
//!
//! They exist only when `SLUICE_ADMIN_TOKEN` is set, and demand
//! `Authorization: Bearer <token>`: 401 without it, 403 with another token.
//! The scheme is case-insensitive (`bearer`, `BEARER`), and spaces may
//! separate it from the token (RFC 9110 §11.1). The token is never logged.
//!
//! Failed authentications (401 and 403) are limited per peer address: 10 at
//! once, then one more every 6 s (10 a minute). A peer with none left gets
//! 429 with `Retry-After` (a problem+json body) **before its token is
//! compared**, until one more failure would fit; a right token from a peer
//! with failures left works as before, and successes cost nothing. The peer
//! is the connection's address, an IPv6 peer's /64 (`ConnectInfo<SocketAddr>` in the request's
//! extensions); requests without one share a single budget. At most 4,096
//! peers are remembered at once (a [`KeyedLimiter`](sluice_store::KeyedLimiter):
//! a full table forgets refilled peers first, then those closest to
//! refilling).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{ConnectInfo, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use sluice_policy::{Engine, PlanSource, RuntimeError, SaveError};

use crate::extract::{Body, Key};
use crate::headers::retry_after_secs;
use crate::problem::Problem;
use crate::reload::{Reloaded, Reloader};

mod failures;

use failures::{Failed, Failures};

/// What the admin routes need.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The engine whose plans are assigned.
    pub engine: Arc<Engine>,
    /// The bearer token.
    pub token: Arc<str>,
    /// The config reloader.
    pub reloader: Arc<Reloader>,
}

/// The admin routes.
pub fn router(admin: Admin) -> axum::Router {
    axum::Router::new()
        .route("/admin/reload", post(reload))
        .route(
            "/admin/keys/{key}/plan",
            get(get_plan).put(put_plan).delete(delete_plan),
        )
        .route("/admin/keys/save", post(save_keys))
        .route(
            "/admin/keys/{key}/credits",
            get(get_credits).put(put_credits),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            Guard {
                admin: admin.clone(),
                failures: Arc::new(Failures::new()),
            },
            require_token,
        ))
        .with_state(admin)
}

/// The token check's state: the routes' settings and the failures so far.
#[derive(Debug, Clone)]
struct Guard {
    admin: Admin,
    failures: Arc<Failures>,
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The token of an `Authorization` value of the `Bearer` scheme: the scheme
/// is matched case-insensitively and may be followed by several spaces
/// (RFC 9110 §11.1, §11.4); `None` for another scheme or no token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty()).then_some(token)
}

/// `None` when the request carries the token, else the refusal.
fn refuse_unauthorized(admin: &Admin, headers: &HeaderMap) -> Option<Response> {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
    else {
        let mut r = Problem::new(
            StatusCode::UNAUTHORIZED,
            "Authorization: Bearer <token> is required.",
        )
        .into_response();
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            http::HeaderValue::from_static("Bearer"),
        );
        return Some(r);
    };
    if same(given.as_bytes(), admin.token.as_bytes()) {
        None
    } else {
        Some(Problem::new(StatusCode::FORBIDDEN, "That token is not allowed here.").into_response())
    }
}

/// Every admin route demands the token; a peer that has failed too often
/// is refused before it is compared.
async fn require_token(
    State(guard): State<Guard>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        // An IPv6 peer is its /64, as everywhere a client is counted.
        .map(|ConnectInfo(addr)| {
            sluice_policy::client_ip::client_network(
                addr.ip(),
                sluice_policy::client_ip::DEFAULT_IPV6_PREFIX,
            )
            .addr()
        });
    if let Some(wait) = guard.failures.locked_out(peer) {
        return too_many_failures(wait);
    }
    let Some(refusal) = refuse_unauthorized(&guard.admin, req.headers()) else {
        return next.run(req).await;
    };
    match guard.failures.fail(peer) {
        Failed::Counted { last: false } => refusal,
        Failed::Counted { last: true } => {
            tracing::warn!(
                peer = %peer.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string()),
                "too many failed admin authentications: this peer is refused for a while"
            );
            refusal
        }
        Failed::Over(wait) => too_many_failures(wait),
    }
}

/// 429 for a peer with no failed authentication left.
fn too_many_failures(wait: sluice_core::Nanos) -> Response {
    let secs = retry_after_secs(wait);
    let mut problem = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        format!(
            "Too many failed admin authentications from this address; \
             the token is not checked again for {secs} s."
        ),
    );
    problem.retry_after = Some(secs);
    let mut r = problem.into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from(secs));
    r
}

async fn reload(State(admin): State<Admin>) -> Response {
    // A reload reads the file twice, a moment apart: off the async workers.
    let reloader = admin.reloader.clone();
    let reloaded = tokio::task::spawn_blocking(move || reloader.reload(true))
        .await
        .unwrap_or_else(|e| {
            Err(sluice_policy::ConfigError {
                file: Default::default(),
                line: 0,
                column: 0,
                message: format!("the reload did not finish: {e}"),
            })
        });
    match reloaded {
        Ok(Reloaded::Applied | Reloaded::Unchanged) => Json(serde_json::json!({
            "reloaded": true,
            "reloads": admin.reloader.succeeded(),
            "failures": admin.reloader.failed(),
        }))
        .into_response(),
        Err(e) => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("The new config was not applied; the running config stays. {e}"),
        )
        .into_response(),
    }
}

/// The body of `PUT /admin/keys/{key}/plan`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlanBody {
    plan: String,
}

fn source_name(s: PlanSource) -> &'static str {
    match s {
        PlanSource::Runtime => "runtime",
        PlanSource::Config => "config",
        PlanSource::Default => "default",
    }
}

async fn get_plan(State(admin): State<Admin>, Key(key): Key) -> Response {
    match admin.engine.plan_of(&key) {
        Some((plan, source)) => {
            Json(serde_json::json!({ "plan": plan, "source": source_name(source) })).into_response()
        }
        None => Problem::new(
            StatusCode::NOT_FOUND,
            "That key has no plan (and there is no default plan).",
        )
        .into_response(),
    }
}

async fn put_plan(State(admin): State<Admin>, Key(key): Key, Body(body): Body) -> Response {
    let body: PlanBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"plan\": \"<name>\"}}: {e}"),
            )
            .into_response();
        }
    };
    match admin.engine.set_plan(&key, &body.plan).await {
        Ok(()) => {
            tracing::info!(plan = %body.plan, "a key was assigned a plan at run time");
            Json(serde_json::json!({ "plan": body.plan, "source": "runtime" })).into_response()
        }
        Err(e @ RuntimeError::UnknownPlan(_)) => {
            Problem::new(StatusCode::UNPROCESSABLE_ENTITY, e.to_string()).into_response()
        }
        Err(e) => store_failed(&e),
    }
}

async fn delete_plan(State(admin): State<Admin>, Key(key): Key) -> Response {
    match admin.engine.clear_plan(&key).await {
        Ok(_) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => store_failed(&e),
    }
}

/// A runtime change the shared store did not take: 503, nothing changed.
fn store_failed(e: &RuntimeError) -> Response {
    tracing::warn!(error = %e, "a runtime change was not made");
    let mut r = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("Nothing was changed; try again. {e}"),
    )
    .into_response();
    r.headers_mut()
        .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    r
}

async fn save_keys(State(admin): State<Admin>) -> Response {
    // Blocking file I/O (a write and an fsync) off the async workers.
    let engine = admin.engine.clone();
    let saved = tokio::task::spawn_blocking(move || engine.save_runtime_assignments()).await;
    match saved {
        Ok(Ok((path, n))) => {
            tracing::info!(file = %path.display(), assignments = n, "runtime key assignments saved");
            Json(serde_json::json!({ "saved": n, "file": path.display().to_string() }))
                .into_response()
        }
        Ok(Err(e @ SaveError::NotConfigured)) => {
            Problem::new(StatusCode::CONFLICT, e.to_string()).into_response()
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "saving runtime key assignments failed");
            Problem::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "saving runtime key assignments failed");
            Problem::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The save did not finish.",
            )
            .into_response()
        }
    }
}

/// The body of `PUT /admin/keys/{key}/credits`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreditsBody {
    #[serde(deserialize_with = "crate::whole_number::required")]
    credits: u64,
}

async fn get_credits(State(admin): State<Admin>, Key(key): Key) -> Response {
    Json(serde_json::json!({ "credits": admin.engine.credits(&key).await })).into_response()
}

async fn put_credits(State(admin): State<Admin>, Key(key): Key, Body(body): Body) -> Response {
    let body: CreditsBody = match serde_json::from_slice(&body) {
        Ok(b) => b,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("expected {{\"credits\": <a whole number>}}: {e}"),
            )
            .into_response();
        }
    };
    if let Err(e) = admin.engine.grant_credits(&key, body.credits).await {
        return store_failed(&e);
    }
    tracing::info!(credits = body.credits, "a key's burst credits were set");
    Json(serde_json::json!({ "credits": body.credits })).into_response()
}

#[cfg(test)]
mod tests {
    use super::bearer_token;

    #[test]
    fn the_bearer_scheme_is_case_insensitive() {
        for v in [
            "Bearer t0k",
            "bearer t0k",
            "BEARER t0k",
            "Bearer   t0k",
            "bearer t0k  ",
        ] {
            assert_eq!(bearer_token(v), Some("t0k"), "{v:?}");
        }
        for v in [
            "Basic t0k",
            "Bearer",
            "Bearer   ",
            "Bearert0k",
            "",
            "Bear t0k",
        ] {
            assert_eq!(bearer_token(v), None, "{v:?}");
        }
    }
}
