//! `[events]`: where account-manager events go besides the log.

use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `[events]`: where account-manager events go besides the log.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventsConfig {
    /// POST each event as JSON to this `http://` URL.
    #[schemars(with = "Option<String>")]
    pub webhook: Option<Spanned<String>>,
    /// Attempts per event (with backoff) before it is dropped; 3 by
    /// default.
    pub attempts: Option<u32>,
    /// Events waiting to be posted, at most; more are dropped and counted.
    /// 1000 by default.
    pub queue: Option<usize>,
}
