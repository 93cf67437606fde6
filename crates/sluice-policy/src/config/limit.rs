//! One limit (`[[limits]]`, or one of a plan's `limits`), with what it does
//! over the limit (`on_limit`) and whose counter it uses (`bucket`).

use std::collections::BTreeMap;

use super::schema::{AlgorithmName, DurationText, KeySourceText, RateText};
use schemars::JsonSchema;
use serde::Deserialize;
use sluice_core::{AlgorithmKind, Rate};
use toml::Spanned;

use super::{MatchConfig, SettleConfig};
use crate::key_source::KeySource;

/// `on_limit`: what happens to a request over the limit.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnLimitConfig {
    /// 429 at once.
    #[default]
    Reject,
    /// Hold it until it fits, up to `max_delay`; 429 beyond.
    Delay,
}

/// `bucket`: whether a limit with a `match` counts on its own.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BucketConfig {
    /// Its own counter (the default).
    #[default]
    Separate,
    /// No counter of its own: a matching request costs `cost` on the plan's
    /// main limits (those without a `match`).
    Shared,
}

/// One limit.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LimitConfig {
    /// The limit's name, shown in headers and errors.
    pub name: Option<String>,
    /// The algorithm; `token_bucket` by default.
    #[serde(default)]
    #[schemars(with = "AlgorithmName")]
    pub algorithm: AlgorithmKind,
    /// The long-run rate, e.g. `"10/s"`. Required, except for a
    /// `bucket = "shared"` rule, which has no counter of its own, and a
    /// concurrency limit, which has none.
    #[schemars(with = "Option<RateText>")]
    pub rate: Option<Spanned<Rate>>,
    /// `algorithm = "concurrency"`: the most requests in flight per key.
    #[schemars(with = "Option<u64>")]
    pub max_in_flight: Option<Spanned<u64>>,
    /// `algorithm = "concurrency"`: how long a slot lives unreleased where
    /// Sluice cannot see the request end (`/v1/check`, Envoy) or an
    /// instance died (Redis); `"60s"` by default.
    #[schemars(with = "Option<DurationText>")]
    pub lease: Option<Spanned<String>>,
    /// The most cost admitted at once; defaults to the rate's amount.
    #[schemars(with = "Option<u64>")]
    pub burst: Option<Spanned<u64>>,
    /// Leaky bucket only: admit within `burst` without delay.
    #[serde(default)]
    pub nodelay: bool,
    /// What the limit counts by; plan limits default to the client key.
    #[schemars(with = "Option<KeySourceText>")]
    pub key: Option<KeySource>,
    /// Which requests the limit applies to; all by default.
    #[serde(default = "default_match", rename = "match")]
    #[schemars(with = "MatchConfig")]
    pub matches: Spanned<MatchConfig>,
    /// The cost of one matching request; 1 by default.
    #[schemars(with = "Option<u64>")]
    pub cost: Option<Spanned<u64>>,
    /// Decide and record, but never refuse (safe rollout).
    #[serde(default)]
    pub shadow: bool,
    /// Enforce for this share of keys (sticky by a keyed hash of the key);
    /// the others are in shadow. 100 by default.
    #[schemars(with = "Option<u8>", range(max = 100))]
    pub enforce_percent: Option<Spanned<u8>>,
    /// Its own counter (`separate`, the default) or the plan's (`shared`).
    #[schemars(with = "Option<BucketConfig>")]
    pub bucket: Option<Spanned<BucketConfig>>,
    /// `reject` (429, the default) or `delay` a request over the limit.
    #[schemars(with = "Option<OnLimitConfig>")]
    pub on_limit: Option<Spanned<OnLimitConfig>>,
    /// With `on_limit = "delay"`: the longest a request is held, e.g.
    /// `"500ms"`.
    #[schemars(with = "Option<DurationText>")]
    pub max_delay: Option<Spanned<String>>,
    /// With `on_limit = "delay"`: the most requests held at once by this
    /// limit on this instance; 100 by default.
    #[schemars(with = "Option<u64>")]
    pub max_queue: Option<Spanned<u64>>,
    /// Priority classes: the most of this limit's burst (in percent) that
    /// the keys of a plan may use, e.g. `{ free = 80 }`; plans not listed
    /// may use all of it.
    #[schemars(with = "Option<BTreeMap<String, u8>>")]
    pub max_share: Option<Spanned<BTreeMap<String, u8>>>,
    /// The cost is settled after the response: `cost` (or the estimate
    /// the rule reads) is charged at admission, the difference afterwards.
    #[schemars(with = "Option<SettleConfig>")]
    pub settle: Option<Spanned<SettleConfig>>,
}

/// A limit with no field given: every field its default (a limit needs
/// at least its `rate`, and a `key` outside plans). A start for a limit
/// built in code, for [`Policy::from_config`](crate::Policy::from_config).
impl Default for LimitConfig {
    fn default() -> Self {
        Self {
            name: None,
            algorithm: AlgorithmKind::default(),
            rate: None,
            max_in_flight: None,
            lease: None,
            burst: None,
            nodelay: false,
            key: None,
            matches: default_match(),
            cost: None,
            shadow: false,
            enforce_percent: None,
            bucket: None,
            on_limit: None,
            max_delay: None,
            max_queue: None,
            max_share: None,
            settle: None,
        }
    }
}

fn default_match() -> Spanned<MatchConfig> {
    Spanned::new(0..0, MatchConfig::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_an_empty_limit() {
        let parsed: LimitConfig = toml::from_str("").unwrap();
        assert_eq!(
            format!("{:?}", LimitConfig::default()),
            format!("{parsed:?}")
        );
    }
}
