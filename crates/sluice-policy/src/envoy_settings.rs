//! The `[envoy]` table, resolved: where the rules come from (YAML files, or
//! an xDS management server), the gRPC listener and its TLS, and how the
//! service answers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::config::{ConfigError, Source};
use crate::config::{EnvoyConfig, EnvoyXdsConfig};

/// The `[envoy]` table, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoySettings {
    /// The envoyproxy/ratelimit YAML files and directories (none with
    /// [`xds`](Self::xds)).
    pub configs: Vec<PathBuf>,
    /// The management server the rules come from, instead of files.
    pub xds: Option<EnvoyXds>,
    /// The gRPC address.
    pub grpc_listen: SocketAddr,
    /// The algorithm of every descriptor limit.
    pub algorithm: sluice_core::AlgorithmKind,
    /// Answer exactly as envoyproxy/ratelimit does.
    pub compat: bool,
    /// Headers in the answer (resolved: on unless `compat`).
    pub response_headers: bool,
    /// The request and the passing descriptors' `metadata` in
    /// `dynamic_metadata`.
    pub response_dynamic_metadata: bool,
    /// Files defining one domain are merged.
    pub merge_domains: bool,
    /// Every rule in shadow mode.
    pub shadow_mode: bool,
    /// TLS on the gRPC listener.
    pub tls: Option<EnvoyTls>,
}

/// `[envoy.tls]`, resolved: the PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyTls {
    /// The certificate chain.
    pub cert: PathBuf,
    /// Its private key.
    pub key: PathBuf,
    /// With mTLS, the CA of client certificates.
    pub client_ca: Option<PathBuf>,
}

/// `[envoy.xds]`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoyXds {
    /// The management server's URL: `http://` or `https://`.
    pub server: String,
    /// This node's id.
    pub node_id: String,
    /// This node's cluster.
    pub node_cluster: String,
    /// With `https://`: the CA of the server's certificate (else the
    /// system's roots are not consulted: a CA is required).
    pub ca: Option<PathBuf>,
    /// A client certificate and key, for mTLS.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl EnvoySettings {
    /// Resolves `[envoy]`, with paths relative to `dir` (the config file's).
    pub(crate) fn resolve(
        source: &Source,
        dir: &Path,
        e: &EnvoyConfig,
    ) -> Result<Self, ConfigError> {
        let configs: Vec<PathBuf> = e
            .config
            .as_ref()
            .map(|c| c.get_ref().all().into_iter().map(|p| dir.join(p)).collect())
            .unwrap_or_default();
        let xds = match (&e.config, &e.xds) {
            (Some(c), Some(_)) => {
                return Err(source.error_at(
                    Some(c.span()),
                    "[envoy]: `config` and `[envoy.xds]` exclude each other: the rules come from files or from a management server",
                ));
            }
            (None, None) => {
                return Err(source.error_at(
                    None,
                    "[envoy]: needs `config` (YAML files) or `[envoy.xds]` (a management server)",
                ));
            }
            (_, Some(x)) => Some(resolve_xds(source, dir, x)?),
            (Some(c), None) if configs.is_empty() => {
                return Err(source.error_at(
                    Some(c.span()),
                    "[envoy] config: names no file (give a file, a directory or a list of them)",
                ));
            }
            // An empty path would name the config's own directory.
            (Some(c), None) if c.get_ref().all().iter().any(|p| p.trim().is_empty()) => {
                return Err(source.error_at(
                    Some(c.span()),
                    "[envoy] config: an empty path names no file (give a file or a directory)",
                ));
            }
            (Some(_), None) => None,
        };
        Ok(Self {
            configs,
            xds,
            grpc_listen: e.grpc_listen,
            algorithm: e.algorithm,
            compat: e.compat,
            response_headers: e.response_headers.unwrap_or(!e.compat),
            response_dynamic_metadata: e.response_dynamic_metadata,
            merge_domains: e.merge_domains,
            shadow_mode: e.shadow_mode,
            tls: e.tls.as_ref().map(|t| EnvoyTls {
                cert: dir.join(&t.cert),
                key: dir.join(&t.key),
                client_ca: t.client_ca.as_ref().map(|c| dir.join(c)),
            }),
        })
    }
}

fn resolve_xds(source: &Source, dir: &Path, x: &EnvoyXdsConfig) -> Result<EnvoyXds, ConfigError> {
    let server = x.server.get_ref();
    let https = server.starts_with("https://");
    if !https && !server.starts_with("http://") {
        return Err(source.error_at(
            Some(x.server.span()),
            format!("[envoy.xds] server: `{server}` must be an http:// or https:// URL"),
        ));
    }
    if !https && (x.ca.is_some() || x.cert.is_some() || x.key.is_some()) {
        return Err(source.error_at(
            Some(x.server.span()),
            "[envoy.xds]: `ca`, `cert` and `key` need an https:// server (over http:// they would be ignored)",
        ));
    }
    if https && x.ca.is_none() {
        return Err(source.error_at(
            Some(x.server.span()),
            "[envoy.xds]: an https:// server needs `ca`, the CA of its certificate",
        ));
    }
    let identity = match (&x.cert, &x.key) {
        (Some(c), Some(k)) => Some((dir.join(c), dir.join(k))),
        (None, None) => None,
        _ => {
            return Err(source.error_at(
                Some(x.server.span()),
                "[envoy.xds]: `cert` and `key` go together",
            ));
        }
    };
    Ok(EnvoyXds {
        server: server.clone(),
        node_id: x.node_id.clone(),
        node_cluster: x.node_cluster.clone(),
        ca: x.ca.as_ref().map(|c| dir.join(c)),
        identity,
    })
}
