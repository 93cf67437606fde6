//! The store-URL parser: the URL taken apart into scheme, user-info, hosts
//! and path ([`Parts`]), then assembled into the deployment that its scheme
//! names.
//!
//! Every error is a reason that never contains a password; the caller
//! pairs it with the redacted URL.

mod deployment;
mod hosts;
mod login;
mod path;
mod scheme;
mod sentinel;
mod userinfo;

use crate::StoreUrl;

use self::login::Login;
use self::scheme::Kind;
use self::userinfo::Credentials;

/// The parser proper; the error is a reason that never contains a password.
pub(crate) fn parse(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<StoreUrl, String> {
    let parts = Parts::split(s.trim(), env)?;
    match parts.kind {
        Kind::Single => deployment::single(parts),
        Kind::Cluster => deployment::cluster(parts),
        Kind::Shards => deployment::shards(parts),
        Kind::Sentinel => sentinel::sentinel(parts, env),
    }
}

/// A store URL taken apart: each part checked on its own, but not yet
/// against the deployment that the scheme names.
struct Parts<'a> {
    /// The scheme as written (for messages).
    scheme: &'a str,
    /// The deployment that the scheme names.
    kind: Kind,
    /// TLS and the credentials, shared by every node.
    login: Login,
    /// The nodes' hosts and ports, in order, none twice.
    hosts: Vec<(String, u16)>,
    /// The path's non-empty `/`-separated segments.
    segments: Vec<&'a str>,
}

impl<'a> Parts<'a> {
    /// Takes the (trimmed) URL `s` apart, in this order: the scheme, the
    /// user-info (a missing password from [`PASSWORD_ENV`](crate::PASSWORD_ENV)),
    /// no query or fragment, the host list, the path.
    fn split(s: &'a str, env: &dyn Fn(&str) -> Option<String>) -> Result<Self, String> {
        let (scheme, rest) = scheme::split_scheme(s)?;
        let (kind, tls) = scheme::parse_scheme(scheme)?;
        let (userinfo, rest) = userinfo::split_userinfo(rest);
        let credentials = Credentials::parse(userinfo)?.or_env_password(env);
        path::reject_query_and_fragment(rest)?;
        let (hostlist, path) = path::split_path(rest);
        let hosts = hosts::parse_host_list(hostlist, kind.default_port())?;
        Ok(Self {
            scheme,
            kind,
            login: Login {
                tls,
                credentials,
                // Read with the rest, so that a URL parsed with another
                // environment (`parse_with_env`) keeps its own.
                ca_file: tls
                    .then(|| env(crate::CA_FILE_ENV))
                    .flatten()
                    .filter(|f| !f.is_empty())
                    .map(std::path::PathBuf::from),
            },
            hosts,
            segments: path::path_segments(path),
        })
    }
}
