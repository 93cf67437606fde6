//! Where and how one Sluice process runs: its listeners, upstream, store,
//! server limits and Envoy service. A config file holds these beside its
//! [`Policy`](crate::Policy), but they are read at start only: a reload
//! swaps the policy and keeps these, logging a changed one as needing a
//! restart.

use std::net::SocketAddr;
use std::path::Path;

use crate::config::{Config, ConfigError, Source};
use crate::envoy_settings::EnvoySettings;
use crate::server_settings::ServerSettings;
use crate::store_settings::StoreSettings;

/// A config's deployment settings, resolved.
///
/// ```
/// let d = sluice_policy::Deployment::from_toml("d.toml", r#"
///     listen = "127.0.0.1:8080"
///     upstream = "http://127.0.0.1:8000"
///     no_limits = true
/// "#)?;
/// assert_eq!(d.listen.port(), 8080);
/// assert!(d.store.url.is_none(), "the embedded memory store by default");
/// # Ok::<(), sluice_policy::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// The data plane's address.
    pub listen: SocketAddr,
    /// The control plane's address.
    pub control_listen: SocketAddr,
    /// The upstream, when the data plane is a reverse proxy.
    pub upstream: Option<http::Uri>,
    /// Where the limits' state lives.
    pub store: StoreSettings,
    /// Timeouts and caps of the listeners and the upstream (`[server]`).
    pub server: ServerSettings,
    /// The Envoy Rate Limit Service, if configured.
    pub envoy: Option<EnvoySettings>,
}

impl Deployment {
    /// Reads and parses a config file, and resolves its deployment.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let source = Source::read(path)?;
        Self::compile(&source, &source.parse()?)
    }

    /// Parses config text (`name` names it in errors), and resolves its
    /// deployment.
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        let source = Source {
            file: name.into(),
            text: text.to_owned(),
        };
        Self::compile(&source, &source.parse()?)
    }

    /// Resolves a parsed config's deployment, pointing errors at the
    /// offending field.
    pub fn compile(source: &Source, config: &Config) -> Result<Self, ConfigError> {
        let upstream = match &config.upstream {
            None => None,
            Some(u) => {
                Some(parse_upstream(u.get_ref()).map_err(|m| source.error_at(Some(u.span()), m))?)
            }
        };
        let dir = source.file.parent().unwrap_or(Path::new(""));
        let store = StoreSettings::from_config(source, &config.store)?;
        Ok(Self {
            listen: config.listen,
            control_listen: config.control_listen,
            upstream,
            store,
            server: ServerSettings::from_config(source, &config.server)?,
            envoy: config
                .envoy
                .as_ref()
                .map(|e| EnvoySettings::resolve(source, dir, e))
                .transpose()?,
        })
    }
}

/// `upstream`: an `http://` URL with a host.
fn parse_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("upstream: `{text}` is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!(
            "upstream: `{text}` must be an http:// URL with a host, e.g. \"http://127.0.0.1:8000\""
        ));
    }
    Ok(uri)
}
