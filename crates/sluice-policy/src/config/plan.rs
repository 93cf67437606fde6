//! `[plans.<name>]`: a plan's limits, their defaults, and its alert.

use super::schema::DurationText;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

use super::{LimitConfig, OnLimitConfig};

/// `[plans.<name>]`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanConfig {
    /// The plan's limits, keyed by the client key unless they say otherwise.
    #[schemars(with = "Vec<LimitConfig>")]
    pub limits: Vec<Spanned<LimitConfig>>,
    /// The default `on_limit` of the plan's limits.
    #[schemars(with = "Option<OnLimitConfig>")]
    pub on_limit: Option<Spanned<OnLimitConfig>>,
    /// The default `max_delay` of the plan's limits, e.g. `"500ms"`.
    #[schemars(with = "Option<DurationText>")]
    pub max_delay: Option<Spanned<String>>,
    /// The default `max_queue` of the plan's limits.
    #[schemars(with = "Option<u64>")]
    pub max_queue: Option<Spanned<u64>>,
    /// Emit one account-manager event when a key of this plan is limited
    /// more than `limited` times within `window`.
    #[schemars(with = "Option<AlertConfig>")]
    pub alert: Option<Spanned<AlertConfig>>,
}

/// `[plans.<name>] alert = { limited = 100, window = "1h" }`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AlertConfig {
    /// Refusals within one window that trigger the event.
    pub limited: u64,
    /// The window, e.g. `"1h"`.
    #[schemars(with = "DurationText")]
    pub window: Spanned<String>,
}
