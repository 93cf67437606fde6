//! `[store]`: where limiter state lives and how the shared store degrades,
//! as written (resolved by `crate::store_settings`).

use super::schema::DurationText;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[store]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// The store's URL: `memory://` (the embedded store), `redis://…`,
    /// `rediss://…`, `redis+cluster://…`, `redis+shards://…` or
    /// `redis+sentinel://…`.
    #[serde(default = "default_store_url")]
    #[schemars(with = "String")]
    pub url: Spanned<String>,
    /// The most keys the memory store tracks at once, per limit.
    #[serde(default = "default_max_keys")]
    pub max_keys: usize,
    /// Redis: the longest a decision waits for the store, e.g. `"10ms"`.
    #[schemars(with = "Option<DurationText>")]
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
    #[schemars(with = "Option<DurationText>")]
    pub breaker_open: Option<Spanned<String>>,
    /// Redis: answer requests refused moments ago locally until their retry
    /// time.
    #[serde(default = "yes")]
    pub over_limit_cache: bool,
    /// Redis: let concurrent decisions share script calls.
    #[serde(default = "yes")]
    pub batch: bool,
    /// Redis: start and run even when a node's `maxmemory-policy` can
    /// evict Sluice's keys (`allkeys-*`, `volatile-*`); Sluice then logs a
    /// warning instead of refusing to start.
    #[serde(default)]
    pub accept_eviction: bool,
    /// Redis: how often each node's `maxmemory-policy` and evictions are
    /// read again while running, e.g. `"30s"`.
    #[schemars(with = "Option<DurationText>")]
    pub eviction_check_interval: Option<Spanned<String>>,
}

/// `store.fallback`.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
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
            accept_eviction: false,
            eviction_check_interval: None,
        }
    }
}

fn default_store_url() -> Spanned<String> {
    Spanned::new(0..0, "memory://".to_owned())
}

fn default_max_keys() -> usize {
    1_000_000
}
