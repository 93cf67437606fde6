//! Adaptive overload protection: a concurrency limit on an upstream that
//! follows its latency, and a gate that sheds the lowest priority class
//! first when the limit is reached. Plain, synchronous and I/O-free, like
//! the rate algorithms: the caller passes the time in.
//!
//! * [`AdaptiveLimit`] is the estimator: a gradient controller that moves a
//!   concurrency limit with the latency of finished requests.
//! * [`Gate`] admits requests against that limit, by priority class, and
//!   feeds their latencies back to it.
//!
//! The algorithm, its defaults and the reasons for them are in
//! `docs/overload.md`.

mod config;
mod gate;
mod limit;

pub use config::{AdaptiveConfig, ConfigError, GateConfig, MAX_CLASSES, WINDOW_SAMPLES};
pub use gate::{ClassSnapshot, Entry, Gate, GateSnapshot, Outcome, Shed};
pub use limit::AdaptiveLimit;
