//! The TOML config file: what it may say, and errors that point into it.
//!
//! Unknown fields are errors. Every error names the file, line and column,
//! and says what was expected, e.g.
//! `sluice.toml:12:8: invalid rate: unknown time unit `fortnight``.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};

use ipnet::IpNet;
use serde::Deserialize;
use sluice_core::{AlgorithmKind, Rate};
use toml::Spanned;

use crate::key_source::KeySource;

/// A parsed config file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The data plane's address.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The control plane's address (check API, health).
    #[serde(default = "default_control_listen")]
    pub control_listen: SocketAddr,
    /// With an upstream, the data plane is a reverse proxy to it.
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
    pub keys: BTreeMap<String, Spanned<String>>,
    /// Limits that apply to every client, whatever its plan.
    #[serde(default)]
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
    /// Says that a config without a single limit is intended. Without it,
    /// such a config is refused (at start and on reload), so that an empty
    /// or half-written file cannot switch limiting off.
    #[serde(default)]
    pub no_limits: bool,
}

/// `[server]`: how long a connection may take and how many there may be,
/// on both listeners, and what the proxy waits for its upstream. Durations
/// are written like `"10s"` or `"500ms"`. Every field has a safe default
/// (see `docs/configuration.md`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The longest a client may take to send a request's head, from its
    /// first byte (or from the connection's start, for the first request).
    pub header_read_timeout: Option<Spanned<String>>,
    /// How long a keep-alive connection may sit idle between requests.
    pub idle_timeout: Option<Spanned<String>>,
    /// How often an HTTP/2 connection is pinged to check the peer is alive
    /// (`"0s"`: never).
    pub http2_keepalive_interval: Option<Spanned<String>>,
    /// How long a ping's answer may take before the connection is closed.
    pub http2_keepalive_timeout: Option<Spanned<String>>,
    /// The most open connections on `listen`.
    pub max_connections: Option<Spanned<usize>>,
    /// The most open connections on `listen` from one client address (an
    /// IPv6 client's `client.ipv6_prefix`); trusted proxies are exempt.
    pub max_connections_per_ip: Option<Spanned<usize>>,
    /// The most open connections on `control_listen`.
    pub control_max_connections: Option<Spanned<usize>>,
    /// The most open connections on `control_listen` from one address.
    pub control_max_connections_per_ip: Option<Spanned<usize>>,
    /// Proxy: the longest a connection to the upstream may take.
    pub upstream_connect_timeout: Option<Spanned<String>>,
    /// Proxy: the longest from sending a request to the upstream (its body
    /// included) to the upstream's response head.
    pub upstream_response_timeout: Option<Spanned<String>>,
    /// Proxy: the most requests in flight to the upstream at once.
    pub upstream_max_in_flight: Option<Spanned<usize>>,
}

/// `[access]`: clients that are never limited (but still counted), and
/// clients that are refused outright with 403.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Client keys never limited.
    #[serde(default)]
    pub allow_keys: Vec<String>,
    /// Client networks never limited.
    #[serde(default)]
    pub allow_cidrs: Vec<IpNet>,
    /// Client keys refused with 403.
    #[serde(default)]
    pub deny_keys: Vec<String>,
    /// Client networks refused with 403.
    #[serde(default)]
    pub deny_cidrs: Vec<IpNet>,
}

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

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_control_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9090))
}

/// `[store]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The store's URL: `memory://` (the embedded store), `redis://…`,
    /// `rediss://…`, `redis+cluster://…`, `redis+shards://…` or
    /// `redis+sentinel://…`.
    #[serde(default = "default_store_url")]
    pub url: Spanned<String>,
    /// The most keys the memory store tracks at once, per limit.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// Redis: the longest a decision waits for the store, e.g. `"10ms"`.
    pub timeout: Option<Spanned<String>>,
    /// Redis: who decides while the store cannot.
    #[serde(default)]
    pub fallback: FallbackConfig,
    /// Redis: how many instances share the limits; the `local` fallback
    /// admits this share of each.
    #[serde(default = "one")]
    pub expected_instances: u32,
    /// Redis: failures in a row that open the circuit breaker.
    #[serde(default = "three")]
    pub breaker_failures: u32,
    /// Redis: how long the breaker stays open before it probes, e.g.
    /// `"500ms"`.
    pub breaker_open: Option<Spanned<String>>,
    /// Redis: answer requests refused moments ago locally until their retry
    /// time.
    #[serde(default = "yes")]
    pub over_limit_cache: bool,
    /// Redis: let concurrent decisions share script calls.
    #[serde(default = "yes")]
    pub batch: bool,
}

/// `store.fallback`.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FallbackConfig {
    /// A local limit of `1/expected_instances` of each limit.
    #[default]
    Local,
    /// Admit everything.
    Allow,
    /// Refuse everything with 503.
    Deny,
}

fn one() -> u32 {
    1
}

fn three() -> u32 {
    3
}

fn yes() -> bool {
    true
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: default_store_url(),
            max_keys: default_max_keys(),
            timeout: None,
            fallback: FallbackConfig::default(),
            expected_instances: 1,
            breaker_failures: 3,
            breaker_open: None,
            over_limit_cache: true,
            batch: true,
        }
    }
}

fn default_store_url() -> Spanned<String> {
    Spanned::new(0..0, "memory://".to_owned())
}

fn default_max_keys() -> usize {
    1_000_000
}

/// `[headers]`: the IETF `RateLimit-Policy`/`RateLimit` fields are always
/// sent; older forms are opt-in.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HeadersConfig {
    /// Also send `RateLimit-Limit`, `RateLimit-Remaining`, `RateLimit-Reset`
    /// (drafts -04 to -06; Reset in seconds from now).
    #[serde(default)]
    pub legacy: bool,
    /// Also send `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
    /// `X-RateLimit-Reset` (Reset in seconds from now, not an epoch).
    #[serde(default)]
    pub x_ratelimit: bool,
}

/// `[client]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Where the client's identity (its API key) comes from; plans and plan
    /// limits are keyed by it.
    pub key: Option<KeySource>,
    /// The plan of a client key that is not assigned one.
    pub default_plan: Option<Spanned<String>>,
    /// Proxies whose `X-Forwarded-For`/`Forwarded` headers are believed.
    #[serde(default)]
    pub trusted_proxies: Vec<IpNet>,
    /// A file of key-to-plan assignments (`.csv`: `key,plan` lines;
    /// `.toml`: `"key" = "plan"`), relative to this config file. Its entries
    /// beat `[keys]`.
    pub keys_file: Option<Spanned<String>>,
    /// Where `POST /admin/keys/save` writes the runtime assignments (a
    /// `.toml` or `.csv` file, relative to this config file); they are
    /// loaded from it at start.
    pub runtime_keys_file: Option<Spanned<String>>,
    /// What a key that changes plan keeps of its used quota.
    #[serde(default)]
    pub carry_over: CarryOver,
    /// How much of an IPv6 client's address identifies it: `ip` keys,
    /// allow and deny lists and per-address connection caps see its
    /// `/ipv6_prefix` network. 64 by default (one subscriber's network);
    /// 128 keys each address.
    pub ipv6_prefix: Option<Spanned<u8>>,
}

/// `client.carry_over`: what a key that changes plan keeps of the quota it
/// has used.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CarryOver {
    /// The new plan starts with the same used fraction as the old one.
    #[default]
    Proportional,
    /// The new plan starts fresh.
    Reset,
}

/// `on_limit`: what happens to a request over the limit.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnLimitConfig {
    /// 429 at once.
    #[default]
    Reject,
    /// Hold it until it fits, up to `max_delay`; 429 beyond.
    Delay,
}

/// `bucket`: whether a limit with a `match` counts on its own.
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BucketConfig {
    /// Its own counter (the default).
    #[default]
    Separate,
    /// No counter of its own: a matching request costs `cost` on the plan's
    /// main limits (those without a `match`).
    Shared,
}

/// `[plans.<name>]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// The plan's limits, keyed by the client key unless they say otherwise.
    pub limits: Vec<Spanned<LimitConfig>>,
    /// The default `on_limit` of the plan's limits.
    pub on_limit: Option<Spanned<OnLimitConfig>>,
    /// The default `max_delay` of the plan's limits, e.g. `"500ms"`.
    pub max_delay: Option<Spanned<String>>,
    /// The default `max_queue` of the plan's limits.
    pub max_queue: Option<Spanned<u64>>,
    /// Emit one account-manager event when a key of this plan is limited
    /// more than `limited` times within `window`.
    pub alert: Option<Spanned<AlertConfig>>,
}

/// `[plans.<name>] alert = { limited = 100, window = "1h" }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertConfig {
    /// Refusals within one window that trigger the event.
    pub limited: u64,
    /// The window, e.g. `"1h"`.
    pub window: Spanned<String>,
}

/// `[events]`: where account-manager events go besides the log.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// POST each event as JSON to this `http://` URL.
    pub webhook: Option<Spanned<String>>,
    /// Attempts per event (with backoff) before it is dropped; 3 by
    /// default.
    pub attempts: Option<u32>,
    /// Events waiting to be posted, at most; more are dropped and counted.
    /// 1000 by default.
    pub queue: Option<usize>,
}

/// One limit.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    /// The limit's name, shown in headers and errors.
    pub name: Option<String>,
    /// The algorithm; `token_bucket` by default.
    #[serde(default)]
    pub algorithm: AlgorithmKind,
    /// The long-run rate, e.g. `"10/s"`. Required, except for a
    /// `bucket = "shared"` rule, which has no counter of its own.
    pub rate: Option<Spanned<Rate>>,
    /// The most cost admitted at once; defaults to the rate's amount.
    pub burst: Option<Spanned<u64>>,
    /// Leaky bucket only: admit within `burst` without delay.
    #[serde(default)]
    pub nodelay: bool,
    /// What the limit counts by; plan limits default to the client key.
    pub key: Option<KeySource>,
    /// Which requests the limit applies to; all by default.
    #[serde(default = "default_match", rename = "match")]
    pub matches: Spanned<MatchConfig>,
    /// The cost of one matching request; 1 by default.
    pub cost: Option<Spanned<u64>>,
    /// Decide and record, but never refuse (safe rollout).
    #[serde(default)]
    pub shadow: bool,
    /// Enforce for this share of keys (sticky by a keyed hash of the key);
    /// the others are in shadow. 100 by default.
    pub enforce_percent: Option<Spanned<u8>>,
    /// Its own counter (`separate`, the default) or the plan's (`shared`).
    pub bucket: Option<Spanned<BucketConfig>>,
    /// `reject` (429, the default) or `delay` a request over the limit.
    pub on_limit: Option<Spanned<OnLimitConfig>>,
    /// With `on_limit = "delay"`: the longest a request is held, e.g.
    /// `"500ms"`.
    pub max_delay: Option<Spanned<String>>,
    /// With `on_limit = "delay"`: the most requests held at once by this
    /// limit on this instance; 100 by default.
    pub max_queue: Option<Spanned<u64>>,
    /// Priority classes: the most of this limit's burst (in percent) that
    /// the keys of a plan may use, e.g. `{ free = 80 }`; plans not listed
    /// may use all of it.
    pub max_share: Option<Spanned<BTreeMap<String, u8>>>,
}

fn default_match() -> Spanned<MatchConfig> {
    Spanned::new(0..0, MatchConfig::default())
}

/// `match = { ... }`: every condition given must hold.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// HTTP methods, any of which matches (case-insensitive).
    #[serde(default)]
    pub methods: Vec<String>,
    /// A path prefix, matched on whole segments (`/export` matches
    /// `/export` and `/export/x`, not `/exports`).
    pub path_prefix: Option<String>,
    /// A path glob: `*` is one segment, `**` any number of segments, e.g.
    /// `/v1/*/export`.
    pub path: Option<String>,
    /// The host (`Host` header or URI authority, without the port): exact,
    /// or `*.example.com` for any subdomain.
    pub host: Option<String>,
    /// A header that must be present (`{ name = "X-Debug" }`) or have a
    /// value (`{ name = "X-Tier", value = "batch" }`).
    pub header: Option<HeaderMatchConfig>,
}

/// `match.header`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatchConfig {
    /// The header's name (case-insensitive).
    pub name: String,
    /// The value it must have (exact, after trimming); any value when absent.
    pub value: Option<String>,
}

/// A config error, located in its file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line; 0 when the error has no location (e.g. unreadable file).
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong, and what was expected.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(
                f,
                "{}:{}:{}: {}",
                self.file.display(),
                self.line,
                self.column,
                self.message
            )
        }
    }
}

/// A config's text, kept to turn byte spans into lines and columns.
#[derive(Debug, Clone)]
pub struct Source {
    /// The file name used in messages.
    pub file: PathBuf,
    /// The file's text.
    pub text: String,
}

impl Source {
    /// Reads a config file.
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            line: 0,
            column: 0,
            message: format!("cannot read the config: {e}"),
        })?;
        Ok(Self {
            file: path.to_owned(),
            text,
        })
    }

    /// An error at byte range `span` (or at no location, for an empty span
    /// at 0 that stands for a default value).
    pub fn error_at(&self, span: Option<Range<usize>>, message: impl Into<String>) -> ConfigError {
        let (line, column) = match span {
            Some(span) => {
                let start = span.start.min(self.text.len());
                let before = &self.text[..start];
                let line = before.matches('\n').count() + 1;
                let line_start = before.rfind('\n').map_or(0, |i| i + 1);
                (line, before[line_start..].chars().count() + 1)
            }
            None => (0, 0),
        };
        ConfigError {
            file: self.file.clone(),
            line,
            column,
            message: message.into(),
        }
    }

    /// Parses the text as a [`Config`].
    pub fn parse(&self) -> Result<Config, ConfigError> {
        toml::from_str(&self.text).map_err(|e| {
            let message = e.message().trim().to_owned();
            self.error_at(Some(e.span().unwrap_or(0..0)), message)
        })
    }
}
