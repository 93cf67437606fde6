//! Admin routes on `control_listen`: `POST /admin/reload`.
//!
//! They exist only when `SLUICE_ADMIN_TOKEN` is set, and demand
//! `Authorization: Bearer <token>`: 401 without it, 403 with another token.
//! The token is never logged.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http::{HeaderMap, StatusCode, header};

use crate::problem::Problem;
use crate::reload::{Reloaded, Reloader};

/// What the admin routes need.
#[derive(Debug, Clone)]
pub struct Admin {
    /// The bearer token.
    pub token: Arc<str>,
    /// The config reloader.
    pub reloader: Arc<Reloader>,
}

/// The admin routes.
pub fn router(admin: Admin) -> axum::Router {
    axum::Router::new()
        .route("/admin/reload", post(reload))
        .with_state(admin)
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// `None` when the request carries the token, else the refusal.
fn refuse_unauthorized(admin: &Admin, headers: &HeaderMap) -> Option<Response> {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
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
    if same(given.trim().as_bytes(), admin.token.as_bytes()) {
        None
    } else {
        Some(Problem::new(StatusCode::FORBIDDEN, "That token is not allowed here.").into_response())
    }
}

async fn reload(State(admin): State<Admin>, headers: HeaderMap) -> Response {
    if let Some(refusal) = refuse_unauthorized(&admin, &headers) {
        return refusal;
    }
    match admin.reloader.reload(true) {
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
