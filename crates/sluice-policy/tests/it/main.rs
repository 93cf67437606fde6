//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod access;
mod config_errors;
mod plan_features;
mod quickstart_policy;
mod reload_fallback;
mod rollout;
