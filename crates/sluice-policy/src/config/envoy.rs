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
    /// The YAML file, a directory of them (the reference server's
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`), or a list of files and
    /// directories; relative to this config file.
    pub config: Spanned<ConfigPaths>,
    /// The gRPC address.
    #[serde(default = "default_grpc_listen")]
    pub grpc_listen: SocketAddr,
    /// The algorithm of every descriptor limit; `fixed_window` (the
    /// reference server's clock-aligned windows) by default.
    #[serde(default = "default_envoy_algorithm")]
    pub algorithm: AlgorithmKind,
}

/// One path, or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConfigPaths {
    /// `config = "ratelimit/config"`.
    One(String),
    /// `config = ["a.yaml", "b.yaml"]`.
    Many(Vec<String>),
}

impl ConfigPaths {
    /// Every path, in order.
    pub fn all(&self) -> Vec<&str> {
        match self {
            Self::One(p) => vec![p.as_str()],
            Self::Many(ps) => ps.iter().map(String::as_str).collect(),
        }
    }
}

fn default_grpc_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}

fn default_envoy_algorithm() -> AlgorithmKind {
    AlgorithmKind::FixedWindow
}
