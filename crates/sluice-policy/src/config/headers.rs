//! `[headers]`: which rate-limit header fields responses carry.

use schemars::JsonSchema;
use serde::Deserialize;

/// `[headers]`: the IETF `RateLimit-Policy`/`RateLimit` fields are always
/// sent; older forms are opt-in.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
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
