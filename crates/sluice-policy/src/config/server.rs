//! `[server]`: the listeners' timeouts and connection caps, and what the
//! proxy waits for its upstream, as written (resolved by
//! `crate::server_settings`).

use super::schema::{DurationOrOffText, DurationText, NetText};
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[server]`: how long a connection may take and how many there may be,
/// on both listeners, and what the proxy waits for its upstream. Durations
/// are written like `"10s"` or `"500ms"`. Every field has a safe default
/// (see `docs/configuration.md`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The longest a client may take to send a request's head, from its
    /// first byte (or from the connection's start, for the first request).
    #[schemars(with = "Option<DurationText>")]
    pub header_read_timeout: Option<Spanned<String>>,
    /// How long a keep-alive connection may sit idle between requests.
    #[schemars(with = "Option<DurationText>")]
    pub idle_timeout: Option<Spanned<String>>,
    /// The longest a response may wait on a client that does not read it
    /// (on both listeners); then the connection is closed.
    #[schemars(with = "Option<DurationText>")]
    pub send_timeout: Option<Spanned<String>>,
    /// How often an HTTP/2 connection is pinged to check the peer is alive
    /// (`"0s"`: never).
    #[schemars(with = "Option<DurationOrOffText>")]
    pub http2_keepalive_interval: Option<Spanned<String>>,
    /// How long a ping's answer may take before the connection is closed.
    #[schemars(with = "Option<DurationText>")]
    pub http2_keepalive_timeout: Option<Spanned<String>>,
    /// The most open connections on `listen`.
    #[schemars(with = "Option<usize>")]
    pub max_connections: Option<Spanned<usize>>,
    /// The most open connections on `listen` from one client address (an
    /// IPv6 client's `client.ipv6_prefix`); trusted proxies are exempt.
    #[schemars(with = "Option<usize>")]
    pub max_connections_per_ip: Option<Spanned<usize>>,
    /// The most open connections on `control_listen`.
    #[schemars(with = "Option<usize>")]
    pub control_max_connections: Option<Spanned<usize>>,
    /// The most open connections on `control_listen` from one address.
    #[schemars(with = "Option<usize>")]
    pub control_max_connections_per_ip: Option<Spanned<usize>>,
    /// The longest a request's body may take to arrive on `listen`, from
    /// the end of its head.
    #[schemars(with = "Option<DurationText>")]
    pub body_timeout: Option<Spanned<String>>,
    /// The longest a request's body may take to arrive on
    /// `control_listen`, from the end of its head.
    #[schemars(with = "Option<DurationText>")]
    pub control_body_timeout: Option<Spanned<String>>,
    /// The networks of layer-4 load balancers whose connections to
    /// `listen` start with a PROXY protocol header (v1 or v2) naming the
    /// client; empty: none do.
    #[serde(default)]
    #[schemars(with = "Vec<NetText>")]
    pub proxy_protocol: Vec<IpNet>,
    /// The same for `control_listen`.
    #[serde(default)]
    #[schemars(with = "Vec<NetText>")]
    pub control_proxy_protocol: Vec<IpNet>,
    /// Proxy: the longest a connection to the upstream may take.
    #[schemars(with = "Option<DurationText>")]
    pub upstream_connect_timeout: Option<Spanned<String>>,
    /// Proxy: the longest from sending a request to the upstream (its body
    /// included) to the upstream's response head.
    #[schemars(with = "Option<DurationText>")]
    pub upstream_response_timeout: Option<Spanned<String>>,
    /// Proxy: the most requests in flight to the upstream at once.
    #[schemars(with = "Option<usize>")]
    pub upstream_max_in_flight: Option<Spanned<usize>>,
    /// How long SIGTERM (or SIGINT) lets requests in flight finish before
    /// Sluice closes what is still open and exits.
    #[schemars(with = "Option<DurationText>")]
    pub shutdown_timeout: Option<Spanned<String>>,
    /// How long a reservation of `POST /v1/check` waits for its
    /// `POST /v1/settle`; one never settled stands at its estimate.
    #[schemars(with = "Option<DurationText>")]
    pub reservation_ttl: Option<Spanned<String>>,
    /// The most reservations of `POST /v1/check` open at once; beyond, the
    /// oldest stands at its estimate.
    #[schemars(with = "Option<usize>")]
    pub max_reservations: Option<Spanned<usize>>,
}
