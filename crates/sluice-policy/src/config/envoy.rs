//! `[envoy]`: the Envoy Rate Limit Service (gRPC).

use std::net::SocketAddr;

use super::schema::AlgorithmName;
use schemars::JsonSchema;
use serde::Deserialize;
use sluice_core::AlgorithmKind;
use toml::Spanned;

/// `[envoy]`: serve Envoy's Rate Limit Service from an envoyproxy/ratelimit
/// YAML config.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvoyConfig {
    /// The YAML file, a directory of them (the reference server's
    /// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`), or a list of files and
    /// directories; relative to this config file.
    #[serde(default)]
    #[schemars(with = "Option<ConfigPaths>")]
    pub config: Option<Spanned<ConfigPaths>>,
    /// The rules from an xDS management server instead of files.
    #[serde(default)]
    pub xds: Option<EnvoyXdsConfig>,
    /// The gRPC address.
    #[serde(default = "default_grpc_listen")]
    pub grpc_listen: SocketAddr,
    /// The algorithm of every descriptor limit; `fixed_window` (the
    /// reference server's clock-aligned windows) by default.
    #[serde(default = "default_envoy_algorithm")]
    #[schemars(with = "AlgorithmName")]
    pub algorithm: AlgorithmKind,
    /// Answer exactly as envoyproxy/ratelimit does (see docs/envoy.md):
    /// limit names as the files give them, its headers only when
    /// `response_headers` asks, and each descriptor counted on its own when
    /// another is over its limit. Off by default.
    #[serde(default)]
    pub compat: bool,
    /// Headers in the answer: the IETF `RateLimit-Policy`/`RateLimit`
    /// fields and `Retry-After` (Sluice's default), or with `compat` the
    /// reference server's `RateLimit-Limit`/`-Remaining`/`-Reset` of the
    /// descriptor nearest its limit (its `LIMIT_RESPONSE_HEADERS_ENABLED`).
    /// On by default, off with `compat`.
    #[serde(default)]
    pub response_headers: Option<bool>,
    /// The request, and the `metadata` of the descriptors that passed, in
    /// the answer's `dynamic_metadata` (the reference server's
    /// `RESPONSE_DYNAMIC_METADATA`). Off by default.
    #[serde(default)]
    pub response_dynamic_metadata: bool,
    /// Files that define one domain are merged into it, instead of being
    /// refused (the reference server's `MERGE_DOMAIN_CONFIG`); a key and
    /// value defined twice at one level is still an error. Off by default.
    #[serde(default)]
    pub merge_domains: bool,
    /// Every rule of the YAML in shadow mode: counted, never refusing (the
    /// reference server's `SHADOW_MODE`). A per-request `limit` override
    /// still refuses. Off by default.
    #[serde(default)]
    pub shadow_mode: bool,
    /// TLS on `grpc_listen`, and mTLS with `client_ca`.
    #[serde(default)]
    pub tls: Option<EnvoyTlsConfig>,
}

/// `[envoy.xds]`: an xDS management server (ADS, state of the world) that
/// sends the rules as `RateLimitConfig` resources.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvoyXdsConfig {
    /// Its URL: `http://host:port`, or `https://` with `ca`.
    #[schemars(with = "String")]
    pub server: Spanned<String>,
    /// This node's id, as the server knows it.
    #[serde(default = "default_node_id")]
    pub node_id: String,
    /// This node's cluster.
    #[serde(default)]
    pub node_cluster: String,
    /// The CA of the server's certificate, PEM, relative to this file.
    #[serde(default)]
    pub ca: Option<String>,
    /// A client certificate, PEM, for mTLS (with `key`).
    #[serde(default)]
    pub cert: Option<String>,
    /// Its private key, PEM.
    #[serde(default)]
    pub key: Option<String>,
}

fn default_node_id() -> String {
    "sluice".to_owned()
}

/// `[envoy.tls]`: PEM files, relative to this config file, read again
/// when they change.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EnvoyTlsConfig {
    /// The certificate chain.
    pub cert: String,
    /// Its private key.
    pub key: String,
    /// The CA that signs client certificates: every client must present one
    /// (mTLS).
    #[serde(default)]
    pub client_ca: Option<String>,
}

/// One path, or several.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
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
