//! `[envoy]`: the Envoy Rate Limit Service (gRPC).

use std::net::SocketAddr;

use serde::Deserialize;
use sluice_core::AlgorithmKind;
use toml::Spanned;

/// `[envoy]`: serve Envoy's Rate Limit Service from an envoyproxy/ratelimit
/// YAML config.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvoyConfig {
    /// The YAML file, relative to this config file.
    pub config: Spanned<String>,
    /// The gRPC address.
    #[serde(default = "default_grpc_listen")]
    pub grpc_listen: SocketAddr,
    /// The algorithm of every descriptor limit; `fixed_window` (the
    /// reference server's clock-aligned windows) by default.
    #[serde(default = "default_envoy_algorithm")]
    pub algorithm: AlgorithmKind,
}

fn default_grpc_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}

fn default_envoy_algorithm() -> AlgorithmKind {
    AlgorithmKind::FixedWindow
}
