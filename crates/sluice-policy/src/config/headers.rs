//! `[headers]`: which rate-limit header fields responses carry.

use schemars::JsonSchema;
use serde::Deserialize;

/// `[headers]`: the IETF `RateLimit-Policy`/`RateLimit` fields are sent on
/// every response by default; older forms are opt-in.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema, PartialEq, Eq)]
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
    /// Send the rate-limit fields on admitted responses too (the IETF
    /// draft's way, the default). `false` sends them only with refusals
    /// (429, with `Retry-After`), as nginx's `limit_req` and
    /// tower_governor do by default: an admitted response then carries no
    /// field but a fallback's `Sluice-Fallback`.
    #[serde(default = "sent")]
    pub on_admitted: bool,
}

fn sent() -> bool {
    true
}

impl Default for HeadersConfig {
    /// The IETF fields on every response; no older forms.
    fn default() -> Self {
        Self {
            legacy: false,
            x_ratelimit: false,
            on_admitted: true,
        }
    }
}
