//! `[access]`: the allow and deny lists.

use super::schema::NetText;
use ipnet::IpNet;
use schemars::JsonSchema;
use serde::Deserialize;

/// `[access]`: clients that are never limited (but still counted), and
/// clients that are refused outright with 403.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AccessConfig {
    /// Client keys never limited.
    #[serde(default)]
    pub allow_keys: Vec<String>,
    /// Client networks never limited.
    #[serde(default)]
    #[schemars(with = "Vec<NetText>")]
    pub allow_cidrs: Vec<IpNet>,
    /// Client keys refused with 403.
    #[serde(default)]
    pub deny_keys: Vec<String>,
    /// Client networks refused with 403.
    #[serde(default)]
    #[schemars(with = "Vec<NetText>")]
    pub deny_cidrs: Vec<IpNet>,
}
