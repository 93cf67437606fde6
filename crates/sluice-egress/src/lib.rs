//! # sluice-egress
//!
//! Rate limits on the calls a service makes to other people's APIs, so that
//! it is not banned or fined. Calls are counted per target (a host, or an
//! API credential); a call that must wait for quota waits, up to a
//! deadline, instead of failing, and fails at once with
//! [`EgressError::Deadline`] when the deadline would pass. When the upstream
//! answers 429 with `Retry-After`, or a `RateLimit` field with `r=0`, calls
//! to it pause for the time given.
//!
//! An organisation that buys tokens from a partner (an LLM provider's
//! tokens per minute) gives the target a [`TokenQuota`]: each call
//! reserves an estimate, and the partner's answer settles it at the usage
//! it reports (see [`tokens`]).
//!
//! - [`EgressLimiter`]: the limiter itself.
//! - [`EgressLayer`]: a tower layer for hyper (or any `http`) clients,
//!   keyed by the request's host.
//! - [`RateLimitedClient`]: a thin `reqwest` wrapper.
//!
//! State is local to the process by default. With
//! [`EgressLimiter::with_shared_store`] it lives in Redis, so that every
//! instance of a service together respects one third-party quota.

mod layer;
mod limiter;
mod metered_body;
mod permit;
mod reqwest_client;
pub mod tokens;
pub mod upstream_signals;

pub use layer::{EgressLayer, EgressService};
pub use limiter::{EgressError, EgressLimiter};
pub use metered_body::MeteredBody;
pub use permit::Permit;
pub use reqwest_client::RateLimitedClient;
pub use tokens::{Settled, TokenEstimate, TokenQuota};
