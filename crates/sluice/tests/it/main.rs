//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod access_lists;
mod account_events;
mod admin_plans;
mod common;
mod control_api;
mod dashboard;
mod edge_admin;
mod edge_clients;
mod edge_connections;
mod edge_control;
mod edge_paths;
mod edge_proxy;
mod edge_reload;
mod edge_rls;
mod envoy_compat;
mod envoy_reference;
mod envoy_reload;
mod envoy_rls;
mod envoy_rls_redis;
mod faults_cluster;
mod faults_network;
mod graceful_shutdown;
mod hot_reload;
mod legacy_headers;
mod metrics;
mod nginx_auth_request;
mod nginx_perimeter;
mod policy_features;
mod proxy_forwarding;
mod proxy_upstream_down;
mod quickstart_one_key;
mod quickstart_plans;
mod redis_degradation;
mod redis_policy_parity;
mod redis_recovery;
mod redis_shared;
mod redis_tls;
mod rollout;
mod shared_runtime_state;
mod simulate_agrees;
mod simulate_cli;
mod status_page;
mod validate;
