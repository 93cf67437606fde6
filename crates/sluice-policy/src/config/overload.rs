//! `[overload]`: adaptive overload protection of the upstream, and what
//! each plan does when it is shed.

use std::collections::BTreeMap;

use super::schema::DurationText;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[overload]`. Present, it switches the protection on (unless
/// `enabled = false`); absent, it is off.
///
/// ```toml
/// [overload]
/// classes = ["free", "pro", "enterprise"]   # lowest first
/// max_limit = 200
///
/// [overload.plans.enterprise]
/// on_overload = "wait"
/// max_wait = "250ms"
/// ```
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverloadConfig {
    /// Whether the protection is on (default: true when the table is
    /// present).
    #[schemars(with = "Option<bool>")]
    pub enabled: Option<Spanned<bool>>,
    /// The plans as priority classes, the lowest first. Plans not listed,
    /// and requests without a plan, are in the lowest class. Empty: one
    /// class for everything.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub classes: Vec<Spanned<String>>,
    /// The limit before any latency is measured (default 20).
    #[schemars(with = "Option<u32>")]
    pub initial_limit: Option<Spanned<u32>>,
    /// The lowest the limit goes (default 4).
    #[schemars(with = "Option<u32>")]
    pub min_limit: Option<Spanned<u32>>,
    /// The highest the limit goes (default 1000).
    #[schemars(with = "Option<u32>")]
    pub max_limit: Option<Spanned<u32>>,
    /// The share of the limit the lowest class may fill, in (0, 1]
    /// (default 0.5).
    #[schemars(with = "Option<f64>")]
    pub lowest_share: Option<Spanned<f64>>,
    /// The most requests waiting for room at once, all plans together
    /// (default 64); a shed request finding the queue full is refused.
    #[schemars(with = "Option<usize>")]
    pub max_waiting: Option<Spanned<usize>>,
    /// What each plan does when shed: `[overload.plans.<plan>]`.
    #[serde(default)]
    #[schemars(with = "BTreeMap<String, OverloadPlanConfig>")]
    pub plans: BTreeMap<String, Spanned<OverloadPlanConfig>>,
}

/// `[overload.plans.<plan>]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OverloadPlanConfig {
    /// `"reject"` (503 at once, the default) or `"wait"` (a short wait for
    /// room, then one more try).
    pub on_overload: OnOverloadConfig,
    /// With `"wait"`: the longest wait, at most 1 s (default `"200ms"`).
    #[schemars(with = "Option<DurationText>")]
    pub max_wait: Option<Spanned<String>>,
}

/// What a shed request of a plan gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OnOverloadConfig {
    /// A 503 with `Retry-After` at once.
    Reject,
    /// A short, bounded wait for room, then one more try.
    Wait,
}
