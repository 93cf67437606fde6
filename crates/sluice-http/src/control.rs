//! The control API on `control_listen`.
//!
//! - `POST /v1/check`: a JSON description of a request in, the decision out,
//!   with status 200 (allowed) or 429 (refused) and the same header fields
//!   the data plane sends, so that services in any language can ask. Where
//!   a limit settles its cost after the request, an admitted check's answer
//!   has a `reservation` (`id`, `expires_in_ms`) to settle.
//! - `POST /v1/settle`: settles a reservation (see
//!   [`settle_api`](crate::settle_api)); `POST /v1/release`, the same, by
//!   the name a concurrency limit's caller expects.
//! - `GET /v1/auth`: the same decision for nginx's `auth_request`
//!   (see [`nginx_auth`](crate::nginx_auth)).
//! - `GET /healthz`: the process is up.
//! - `GET /readyz`: the process is ready to decide.
//! - `GET /metrics`: Prometheus metrics (see [`metrics`](crate::metrics)).
//! - `GET /`: the live [status page](crate::status_page), polling
//!   `GET /v1/status`.
//! - `GET /openapi.yaml`: the OpenAPI document of all of these, and of the
//!   [admin routes](crate::admin) (see [`openapi`](crate::openapi)).
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
//!
//! `headers` holds at most [`MAX_CHECK_HEADERS`] entries, the most header
//! fields the data plane accepts (hyper's default): a body with more is a
//! 400 problem, refused while it is read, before any map is built.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Extension, FromRef, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use sluice_policy::{Engine, Outcome, RequestInfo};

use crate::extract::Body;
use crate::headers::add_headers;
use crate::metrics::Metrics;
use crate::problem::Problem;
use crate::reservations::Reservations;
use crate::settle_api::ReservationJson;
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
    /// Request header fields: at most [`MAX_CHECK_HEADERS`] entries.
    #[serde(default, deserialize_with = "bounded_headers")]
    pub headers: BTreeMap<String, String>,
    /// The address the request came from.
    pub client_ip: Option<IpAddr>,
    /// A cost that replaces each matched limit's configured cost.
    #[serde(default, deserialize_with = "crate::whole_number::optional")]
    pub cost: Option<u64>,
    /// The request's JSON body, or as much of it as the caller has: where
    /// a settle rule's `estimate = "json:<field>"` reads its estimate and
    /// a `match.json` condition its field (whole numbers and booleans at
    /// the top level; anything else is ignored). A body that is not an
    /// object counts as one the proxy could not read.
    pub body: Option<serde_json::Value>,
}

impl CheckRequest {
    /// The whole-number and boolean fields at the top level of its `body`
    /// ([`BodyFields::unreadable`](sluice_policy::request_body::BodyFields::unreadable)
    /// when that is not an object).
    pub fn body_fields(&self) -> Option<sluice_policy::request_body::BodyFields> {
        let Some(object) = self.body.as_ref()?.as_object() else {
            return Some(sluice_policy::request_body::BodyFields::unreadable());
        };
        let mut fields = sluice_policy::request_body::BodyFields::new();
        for (name, value) in object {
            if let Some(n) = value.as_u64() {
                fields.push_whole(name, n);
            } else if let Some(b) = value.as_bool() {
                fields.push_bool(name, b);
            }
        }
        Some(fields)
    }

    /// What the check describes, as the engine takes it: the method, the
    /// header fields and the path without its query; or why it cannot be
    /// (the `detail` of a 400).
    pub fn parts(&self) -> Result<(Method, HeaderMap, &str), String> {
        // Any case is taken; the usual one without a copy.
        let method = if self.method.bytes().any(|b| b.is_ascii_lowercase()) {
            Method::from_bytes(self.method.to_ascii_uppercase().as_bytes())
        } else {
            Method::from_bytes(self.method.as_bytes())
        };
        let Ok(method) = method else {
            return Err(format!("`{}` is not an HTTP method", self.method));
        };
        let mut headers = HeaderMap::new();
        for (name, value) in &self.headers {
            let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) else {
                return Err(format!("invalid header field `{name}`"));
            };
            headers.append(n, v);
        }
        let path = self.path.split('?').next().unwrap_or("/");
        Ok((method, headers, path))
    }
}

fn default_method() -> String {
    "GET".into()
}

/// The most entries the `headers` object of a check request may hold: the
/// most header fields the data plane accepts in one request (hyper's
/// default). Past it, `http::HeaderMap` would grow without need, and past
/// about 32,000 entries it panics.
pub const MAX_CHECK_HEADERS: usize = 100;

/// Reads the `headers` object, failing at its entry number
/// [`MAX_CHECK_HEADERS`]` + 1`: the rest of the object is never read into a
/// map. Entries are counted as read, so repeated names count each time.
fn bounded_headers<'de, D>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error>
where
    D: Deserializer<'de>,
{
    struct Bounded;

    impl<'de> Visitor<'de> for Bounded {
        type Value = BTreeMap<String, String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(
                f,
                "an object of at most {MAX_CHECK_HEADERS} header fields (name: value)"
            )
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut headers = BTreeMap::new();
            let mut read = 0usize;
            while let Some((name, value)) = map.next_entry::<String, String>()? {
                read += 1;
                if read > MAX_CHECK_HEADERS {
                    return Err(serde::de::Error::custom(format_args!(
                        "`headers` may hold at most {MAX_CHECK_HEADERS} header fields \
                         (the most a request to the data plane may carry)"
                    )));
                }
                headers.insert(name, value);
            }
            Ok(headers)
        }
    }

    deserializer.deserialize_map(Bounded)
}

/// The control API's router, with the default reservation settings.
pub fn router(engine: Arc<Engine>, metrics: Arc<Metrics>) -> axum::Router {
    let defaults = sluice_policy::server_settings::ServerSettings::default();
    let reservations = Arc::new(Reservations::new(
        defaults.reservation_ttl,
        defaults.max_reservations,
    ));
    router_with(engine, metrics, None, reservations)
}

/// The control API's router, with the reloader that knows the config's
/// version (shown on the status page), and where the reservations of
/// `/v1/check` are kept.
pub fn router_with(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    reloader: Option<Arc<crate::reload::Reloader>>,
    reservations: Arc<Reservations>,
) -> axum::Router {
    metrics.watch_reservations(reservations.clone());
    settle_expired(&engine, &metrics, &reservations);
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
        .route("/v1/settle", post(crate::settle_api::settle))
        .route("/v1/release", post(crate::settle_api::settle))
        .route("/v1/renew", post(crate::settle_api::renew))
        .route("/v1/auth", get(crate::nginx_auth::auth))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/metrics", get(serve_metrics))
        .route("/openapi.yaml", get(crate::openapi::document))
        .with_state(Shared {
            engine,
            metrics,
            reservations,
        })
}

/// What the control API's handlers share: the router's state, from which
/// each takes the parts it names (`State<Arc<Engine>>`, say). Reading a
/// part clones its `Arc`; an `Extension` layer would put each in every
/// request's extensions, and the handler would look it up there.
#[derive(Clone)]
struct Shared {
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    reservations: Arc<Reservations>,
}

impl FromRef<Shared> for Arc<Engine> {
    fn from_ref(shared: &Shared) -> Self {
        shared.engine.clone()
    }
}

impl FromRef<Shared> for Arc<Metrics> {
    fn from_ref(shared: &Shared) -> Self {
        shared.metrics.clone()
    }
}

impl FromRef<Shared> for Arc<Reservations> {
    fn from_ref(shared: &Shared) -> Self {
        shared.reservations.clone()
    }
}

/// Settles, every second, the reservations that expired unsettled, with
/// nothing observed: a rate limit's estimate stands, a concurrency limit's
/// slot is given back. The task ends with the reservations; it is not
/// started outside a tokio runtime (a router built for a test of routing
/// alone).
fn settle_expired(engine: &Arc<Engine>, metrics: &Arc<Metrics>, reservations: &Arc<Reservations>) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (engine, metrics) = (engine.clone(), metrics.clone());
    let reservations = Arc::downgrade(reservations);
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let Some(r) = reservations.upgrade() else {
                return;
            };
            for expired in r.drain_expired() {
                let settled = engine
                    .settle(&expired, &sluice_policy::settlement::Observed::default())
                    .await;
                metrics.record_settled(&settled);
            }
        }
    });
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
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
    State(metrics): State<Arc<Metrics>>,
    State(reservations): State<Arc<Reservations>>,
    Body(body): Body,
) -> Response {
    let req: CheckRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(format!("invalid check request: {e}")),
    };
    let (method, headers, path) = match req.parts() {
        Ok(parts) => parts,
        Err(e) => return bad_request(e),
    };
    let fields = req.body_fields();
    let decided = engine
        .decide_reserving(&RequestInfo {
            method: &method,
            path,
            headers: &headers,
            peer: req.client_ip,
            cost: req.cost,
            body: fields.as_ref(),
        })
        .await;
    let (verdict, reservation) = match decided {
        Ok(both) => both,
        Err(e) => {
            metrics.record_error(&e);
            return decide_error_response(&e);
        }
    };
    metrics.record(&verdict);
    // The engine's status: 429 for a limit, 503 when the store is down and
    // its fallback refuses everything.
    let status = Outcome::of_verdict(&verdict).status_code();
    let mut json = VerdictJson::new(&verdict);
    if let Some(r) = reservation {
        metrics.record_reserved(&r);
        match reservations.open(r.clone()) {
            Some((id, ttl)) => {
                metrics.record_reservation(crate::metrics::ReservationEvent::opened);
                json.reservation = Some(ReservationJson::new(id, ttl));
            }
            // No id could be made: settled now, with nothing observed (the
            // estimate stands, a slot is given back).
            None => {
                let settled = engine
                    .settle(&r, &sluice_policy::settlement::Observed::default())
                    .await;
                metrics.record_settled(&settled);
            }
        }
    }
    let mut response = json.into_response();
    *response.status_mut() = status;
    add_headers(&verdict, response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: usize) -> String {
        let fields: Vec<String> = (0..n).map(|i| format!("\"h{i}\":\"v\"")).collect();
        format!("{{\"path\":\"/\",\"headers\":{{{}}}}}", fields.join(","))
    }

    #[test]
    fn the_headers_object_is_capped_while_it_is_read() {
        let ok: CheckRequest = serde_json::from_str(&body(MAX_CHECK_HEADERS)).unwrap();
        assert_eq!(ok.headers.len(), MAX_CHECK_HEADERS);
        let Err(e) = serde_json::from_str::<CheckRequest>(&body(MAX_CHECK_HEADERS + 1)) else {
            panic!("101 header fields were accepted");
        };
        assert!(e.to_string().contains("at most 100 header fields"), "{e}");
        // Repeated names count each time they are read.
        let repeated = format!(
            "{{\"path\":\"/\",\"headers\":{{{}}}}}",
            vec!["\"a\":\"v\""; MAX_CHECK_HEADERS + 1].join(",")
        );
        assert!(serde_json::from_str::<CheckRequest>(&repeated).is_err());
        let none: CheckRequest = serde_json::from_str(r#"{"path":"/"}"#).unwrap();
        assert!(none.headers.is_empty());
    }
}
