//! # sluice-http
//!
//! Sluice's HTTP adapters. They only translate: HTTP in, a
//! [`RequestInfo`](sluice_policy::RequestInfo) to the engine, its
//! [`Verdict`](sluice_policy::Verdict) back out as status, header fields and
//! body.
//!
//! - [`headers`]: `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-10),
//!   `Retry-After`, and the opt-in older forms.
//! - [`problem`]: `application/problem+json` bodies (RFC 9457).
//! - [`layer`]: the tower middleware, for any axum `Router` or hyper service.
//! - [`data_plane`]: every path of `listen`: the middleware around an echo of
//!   the decision, or around a reverse proxy to the upstream.
//! - [`control`]: `POST /v1/check`, `GET /v1/auth` (for nginx), `/healthz`,
//!   `/readyz` on `control_listen`.
//! - [`openapi`]: the control API's OpenAPI document, at `GET /openapi.yaml`.
//! - [`metrics`]: Prometheus metrics at `GET /metrics` on `control_listen`,
//!   with the [`top_keys`] sketch and the rate-limited [`rejection_log`].
//! - [`server`]: binds both and shuts down gracefully; each is served by a
//!   [`listener`] that caps connections ([`conn_limits`]), closes slow
//!   and idle ones ([`conn_activity`]), bounds request bodies
//!   ([`body_deadline`], in [`conn_service`]) and reads the PROXY protocol
//!   from listed load balancers ([`proxy_protocol`], [`proxy_protocol_io`]).

pub mod account_events;
pub mod admin;
mod answered;
pub mod body_deadline;
pub mod conn_activity;
pub mod conn_limits;
pub mod conn_service;
pub mod control;
pub mod data_plane;
pub mod edge;
pub mod extract;
pub mod forwarding_fields;
pub mod guarded_body;
pub use sluice_headers as headers;
pub mod layer;
pub mod layer_builder;
pub mod listener;
pub mod metrics;
pub mod name_set;
pub mod nginx_auth;
pub mod openapi;
pub mod overload;
pub mod overload_layer;
pub mod problem;
pub mod proxy;
pub mod proxy_protocol;
pub mod proxy_protocol_io;
pub mod rejection_log;
pub mod reload;
pub mod request_fields;
pub mod reservations;
pub mod sending_body;
pub mod server;
pub mod settle_api;
pub mod settling_body;
pub mod status_page;
pub mod top_keys;
pub mod upstream;
pub mod verdict_json;
pub mod whole_number;

pub use layer::{RateLimit, RateLimitLayer};
pub use server::{Servers, serve};
