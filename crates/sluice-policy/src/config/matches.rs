//! A limit's `match`: which requests it applies to.

use schemars::JsonSchema;
use serde::Deserialize;

/// `match = { ... }`: every condition given must hold.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// HTTP methods, any of which matches (case-insensitive).
    #[serde(default)]
    pub methods: Vec<String>,
    /// A path prefix, matched on whole segments (`/export` matches
    /// `/export` and `/export/x`, not `/exports`).
    pub path_prefix: Option<String>,
    /// A path glob: `*` is one segment, `**` any number of segments, e.g.
    /// `/v1/*/export`.
    pub path: Option<String>,
    /// The host (`Host` header or URI authority, without the port): exact,
    /// or `*.example.com` for any subdomain.
    pub host: Option<String>,
    /// A header that must be present (`{ name = "X-Debug" }`) or have a
    /// value (`{ name = "X-Tier", value = "batch" }`).
    pub header: Option<HeaderMatchConfig>,
    /// A boolean field at the top level of the request's JSON body, e.g.
    /// `{ name = "stream", value = true }` for streaming LLM calls. The
    /// body is read first (bounded); one that cannot be read in bounds
    /// matches too, and a request without a JSON body does not.
    pub json: Option<JsonMatchConfig>,
}

/// `match.json`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct JsonMatchConfig {
    /// The field's name, at the top level of the body.
    pub name: String,
    /// The value it must have.
    pub value: bool,
}

/// `match.header`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HeaderMatchConfig {
    /// The header's name (case-insensitive).
    pub name: String,
    /// The value it must have (exact, after trimming); any value when absent.
    pub value: Option<String>,
}
