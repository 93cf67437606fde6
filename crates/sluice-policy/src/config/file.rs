//! The whole config file: its top-level keys, and a field per table.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

use super::{
    AccessConfig, ClientConfig, EnvoyConfig, EventsConfig, HeadersConfig, LimitConfig,
    OverloadConfig, PlanConfig, ServerConfig, StoreConfig,
};

/// A parsed config file.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The data plane's address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The control plane's address (check API, health).
    #[serde(default = "default_control_listen")]
    pub control_listen: SocketAddr,
    /// With an upstream, the data plane is a reverse proxy to it.
    #[schemars(with = "Option<String>")]
    pub upstream: Option<Spanned<String>>,
    /// Where limiter state lives.
    #[serde(default)]
    pub store: StoreConfig,
    /// Which rate-limit header fields responses carry.
    #[serde(default)]
    pub headers: HeadersConfig,
    /// How clients are identified.
    #[serde(default)]
    pub client: ClientConfig,
    /// Plans by name.
    #[serde(default)]
    pub plans: BTreeMap<String, PlanConfig>,
    /// Client keys assigned to plans: `"<key>" = "<plan>"`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, String>")]
    pub keys: BTreeMap<String, Spanned<String>>,
    /// Limits that apply to every client, whatever its plan.
    #[serde(default)]
    #[schemars(with = "Vec<LimitConfig>")]
    pub limits: Vec<Spanned<LimitConfig>>,
    /// The Envoy Rate Limit Service (gRPC), if wanted.
    pub envoy: Option<EnvoyConfig>,
    /// Allow and deny lists.
    #[serde(default)]
    pub access: AccessConfig,
    /// Account-manager events.
    #[serde(default)]
    pub events: EventsConfig,
    /// Timeouts and caps of the listeners and of the upstream.
    #[serde(default)]
    pub server: ServerConfig,
    /// Adaptive overload protection of the upstream; absent: off.
    #[schemars(with = "Option<OverloadConfig>")]
    pub overload: Option<Spanned<OverloadConfig>>,
    /// Says that a config without a single limit is intended. Without it,
    /// such a config is refused (at start and on reload), so that an empty
    /// or half-written file cannot switch limiting off.
    #[serde(default)]
    pub no_limits: bool,
}

/// What an empty file says: every field its default. (Compiled as it is,
/// it limits nothing, and is refused without `no_limits`.) A start for a
/// config built in code, for [`Policy::from_config`](crate::Policy::from_config).
impl Default for Config {
    fn default() -> Self {
        Self {
            listen: default_listen(),
            control_listen: default_control_listen(),
            upstream: None,
            store: StoreConfig::default(),
            headers: HeadersConfig::default(),
            client: ClientConfig::default(),
            plans: BTreeMap::new(),
            keys: BTreeMap::new(),
            limits: Vec::new(),
            envoy: None,
            access: AccessConfig::default(),
            events: EventsConfig::default(),
            server: ServerConfig::default(),
            overload: None,
            no_limits: false,
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_control_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9090))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_an_empty_file() {
        let parsed: Config = toml::from_str("").unwrap();
        assert_eq!(format!("{:?}", Config::default()), format!("{parsed:?}"));
    }
}
