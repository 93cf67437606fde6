//! # sluice-envoy
//!
//! Sluice as an Envoy Rate Limit Service:
//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over gRPC,
//! with the `grpc.health.v1` health service, deciding on the same engine and
//! store as the rest of Sluice. It loads envoyproxy/ratelimit YAML configs as
//! they are ([`yaml_config`], [`rules`]), so their users switch by pointing
//! Envoy at Sluice. Its counters live in memory or, shared by every instance,
//! in Redis ([`counters`]).

pub mod counters;
pub mod rules;
pub mod service;
pub mod yaml_config;

pub use rules::{Rules, RulesError};
pub use service::{EnvoyRls, InvalidRequest, serve, validate};
