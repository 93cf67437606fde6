//! `[client]`: how clients are identified and assigned plans.

use super::schema::{ForwardedHeaderName, KeySourceText, NetText};
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

use crate::forwarded::ForwardedHeader;
use crate::key_source::KeySource;

/// `[client]`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Where the client's identity (its API key) comes from; plans and plan
    /// limits are keyed by it.
    #[schemars(with = "Option<KeySourceText>")]
    pub key: Option<KeySource>,
    /// The plan of a client key that is not assigned one.
    #[schemars(with = "Option<String>")]
    pub default_plan: Option<Spanned<String>>,
    /// Proxies whose forwarding headers (`X-Forwarded-For`, `Forwarded`,
    /// `X-Real-IP`) are believed.
    #[serde(default)]
    #[schemars(with = "Vec<NetText>")]
    pub trusted_proxies: Vec<IpNet>,
    /// The one forwarding header the trusted proxies write
    /// (`"x-forwarded-for"`, `"forwarded"` or `"x-real-ip"`); the others
    /// are ignored. Unset, every one present is read, and a request whose
    /// headers name different clients is refused as ambiguous.
    #[schemars(with = "Option<ForwardedHeaderName>")]
    pub forwarded_header: Option<ForwardedHeader>,
    /// A file of key-to-plan assignments (`.csv`: `key,plan` lines;
    /// `.toml`: `"key" = "plan"`), relative to this config file. Its entries
    /// beat `[keys]`.
    #[schemars(with = "Option<String>")]
    pub keys_file: Option<Spanned<String>>,
    /// Accept a keys file with no entries, and a reload that loses more
    /// than half of the assigned keys at once (both refused by default).
    #[serde(default)]
    pub allow_keys_file_loss: bool,
    /// Where `POST /admin/keys/save` writes the runtime assignments (a
    /// `.toml` or `.csv` file, relative to this config file); they are
    /// loaded from it at start.
    #[schemars(with = "Option<String>")]
    pub runtime_keys_file: Option<Spanned<String>>,
    /// What a key that changes plan keeps of its used quota.
    #[serde(default)]
    pub carry_over: CarryOver,
    /// How much of an IPv6 client's address identifies it: `ip` keys,
    /// allow and deny lists and per-address connection caps see its
    /// `/ipv6_prefix` network. 64 by default (one subscriber's network);
    /// 128 keys each address.
    #[schemars(with = "Option<u8>")]
    pub ipv6_prefix: Option<Spanned<u8>>,
}

/// `client.carry_over`: what a key that changes plan keeps of the quota it
/// has used.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum CarryOver {
    /// The new plan starts with the same used fraction as the old one.
    #[default]
    Proportional,
    /// The new plan starts fresh.
    Reset,
}
