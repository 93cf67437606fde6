//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod adaptive_overload;
mod admission_bounds;
mod bucket_equivalences;
mod clock_backwards;
mod common;
mod concurrency_model;
mod debt_bounds;
mod debt_examples;
mod debt_rules;
mod edge_cases;
mod idle_at;
mod nginx_limit_req;
mod reference_models;
mod refunds;
mod retry_after;
mod settlement_models;
