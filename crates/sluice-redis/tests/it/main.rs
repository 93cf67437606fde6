//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
mod conformance;
mod debt;
mod debt_outage;
mod eviction_nodes;
mod registered;
mod reload_fallback;
mod reserve;
mod runtime_state;
mod slots;
mod store;
mod store_topology;
mod topology_cluster;
mod topology_ring;
mod topology_sentinel;
mod topology_shards;
mod topology_single;
mod url;
