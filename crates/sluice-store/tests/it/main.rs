//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod atomic_table;
mod common;
mod concurrency;
mod debit;
mod direct;
mod keyed;
mod leases;
mod memory_store;
