//! The envoyproxy/ratelimit config format, read as it is.
//!
//! ```yaml
//! domain: edge_proxy
//! descriptors:
//!   - key: remote_address
//!     rate_limit: { unit: second, requests_per_unit: 10 }
//!   - key: api_key
//!     value: premium-*
//!     rate_limit: { unit: minute, requests_per_unit: 600, name: premium }
//!     descriptors:
//!       - key: path
//!         rate_limit: { unit: second, requests_per_unit: 5 }
//!   - key: uploads
//!     rate_limit: { max_in_flight: 4, lease: 30s, name: uploads }
//! ```
//!
//! `max_in_flight` (and its `lease`) is Sluice's own: a concurrency limit
//! instead of a rate (see [`compile`](crate::compile)).

use serde::Deserialize;

/// A whole config file: one domain.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlConfig {
    /// The domain Envoy names in its requests.
    pub domain: String,
    /// The top level of the descriptor tree.
    #[serde(default)]
    pub descriptors: Vec<YamlDescriptor>,
}

/// One node of the descriptor tree.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlDescriptor {
    /// The entry key to match.
    pub key: String,
    /// The entry value to match: exact, or a [pattern](crate::pattern)
    /// with `*` anywhere; any value when absent.
    pub value: Option<String>,
    /// The limit of a request descriptor that ends at this node.
    pub rate_limit: Option<YamlRateLimit>,
    /// Deeper levels.
    #[serde(default)]
    pub descriptors: Vec<YamlDescriptor>,
    /// Count, but never refuse.
    #[serde(default)]
    pub shadow_mode: bool,
    /// An over-limit answer here refuses the request only when every
    /// quota-mode descriptor of the request is over its limit.
    #[serde(default)]
    pub quota_mode: bool,
    /// With a wildcard `value`: every value it matches counts on one
    /// counter, instead of one counter per value.
    #[serde(default)]
    pub share_threshold: bool,
    /// Per-value statistics (the reference server's stats keys): accepted,
    /// without effect on decisions.
    #[serde(default)]
    pub detailed_metric: bool,
    /// The request's value in statistics keys: accepted, without effect on
    /// decisions.
    #[serde(default)]
    pub value_to_metric: bool,
    /// Arbitrary data returned in the response's `dynamic_metadata` for a
    /// descriptor that passes, when `[envoy] response_dynamic_metadata` is
    /// on.
    #[serde(default)]
    pub metadata: Option<serde_yaml_ng::Mapping>,
}

/// `rate_limit:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlRateLimit {
    /// `second`, `minute`, `hour`, `day`, `week`, `month` or `year`.
    #[serde(default)]
    pub unit: Option<String>,
    /// Requests per unit (0 when absent).
    #[serde(default)]
    pub requests_per_unit: Option<u32>,
    /// A concurrency limit instead of a rate: the most requests in flight
    /// per descriptor (Sluice's own field; with neither `unit` nor
    /// `requests_per_unit`).
    #[serde(default)]
    pub max_in_flight: Option<u32>,
    /// With `max_in_flight`: how long a slot lives when its release never
    /// comes (`30s`, `5m`); the TOML concurrency limits' default when
    /// absent.
    #[serde(default)]
    pub lease: Option<String>,
    /// No limit at all.
    #[serde(default)]
    pub unlimited: bool,
    /// A name for the limit (shown in statuses and header fields).
    pub name: Option<String>,
    /// Names of limits this one replaces when both apply.
    #[serde(default)]
    pub replaces: Vec<YamlReplace>,
}

/// An entry of `replaces:`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct YamlReplace {
    /// The replaced limit's name.
    pub name: String,
}
