//! # sluice-envoy
//!
//! Sluice as an Envoy Rate Limit Service:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over gRPC,
//! with the `grpc.health.v1` health service, deciding on the same engine and
//! store as the rest of Sluice. It loads envoyproxy/ratelimit YAML configs as
//! they are ([`yaml_config`], [`rules`]), so their users switch by pointing
//! Envoy at Sluice.
//!
//! - [`request`]: the shape of a request, checked first;
//! - [`rules`]: which limit each descriptor meets;
//! - [`answer`]: descriptors in, the engine's verdict out as statuses and
//!   headers (the engine decides: all or nothing, shadow, impossible
//!   costs, the store's fallback);
//! - [`service`]: the gRPC server.

pub mod answer;
pub mod compile;
mod counting;
mod descriptor_key;
mod dynamic_metadata;
pub mod from_proto;
pub mod http_api;
pub mod json_api;
pub mod load;
pub mod overrides;
pub mod pattern;
pub mod reference_env;
pub mod reload;
pub mod request;
pub mod rules;
pub mod service;
pub mod stats;
mod statuses;
pub mod stream_done;
pub mod tls;
pub mod xds;
pub mod yaml_config;
pub mod yaml_locate;

pub use answer::{EnvoyRls, Options};
pub use compile::Loading;
pub use load::Texts;
pub use reload::RulesReloader;
pub use request::{InvalidRequest, validate};
pub use rules::{Rules, RulesError};
pub use service::serve;
