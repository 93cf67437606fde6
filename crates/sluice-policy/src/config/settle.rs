//! `settle`: a limit whose cost is settled after the response (see
//! [`settlement`](crate::settlement)).

use schemars::JsonSchema;
use serde::Deserialize;
use toml::Spanned;

/// `debt`: what happens to debt at the end of a window.
#[derive(Debug, Clone, Copy, Default, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DebtConfig {
    /// Carried into the next windows until the rate has paid it off (the
    /// default).
    #[default]
    Carry,
    /// Window algorithms: dropped when its window ends.
    Forgive,
}

/// A status in `charge_status` or `refund_status`: a code (`429`) or a
/// class or code as text (`"5xx"`, `"401"`).
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(untagged)]
pub enum StatusItem {
    /// A code.
    Code(u16),
    /// A class or a code, as text.
    Text(String),
}

impl StatusItem {
    /// The item as text, as [`StatusSet::parse`](crate::settlement::StatusSet::parse)
    /// takes it.
    pub fn text(&self) -> String {
        match self {
            Self::Code(c) => c.to_string(),
            Self::Text(t) => t.clone(),
        }
    }
}

/// A limit's `settle` table.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SettleConfig {
    /// Where the actual cost comes from: `"reported"` (the default: the
    /// application, `/v1/settle`, Envoy's stream-done hits),
    /// `"header:<Name>"`, `"trailer:<Name>"`, `"body_bytes"`, `"usage"`
    /// (`usage.total_tokens`), `"usage.prompt_tokens"`,
    /// `"usage.completion_tokens"`, or `"estimate"` (status rules only).
    #[schemars(with = "Option<String>")]
    pub from: Option<Spanned<String>>,
    /// A request header naming the estimate, `"header:<Name>"`; the limit's
    /// `cost` otherwise.
    #[schemars(with = "Option<String>")]
    pub estimate: Option<Spanned<String>>,
    /// The most debt a settlement may leave; one burst by default.
    #[schemars(with = "Option<u64>")]
    pub max_debt: Option<Spanned<u64>>,
    /// `carry` (the default) or `forgive` debt at the end of a window.
    #[serde(default)]
    pub debt: DebtConfig,
    /// Only these statuses are charged (e.g. `["401", "5xx"]`).
    #[schemars(with = "Option<Vec<StatusItem>>")]
    pub charge_status: Option<Spanned<Vec<StatusItem>>>,
    /// These statuses are given back (e.g. `["5xx"]`).
    #[schemars(with = "Option<Vec<StatusItem>>")]
    pub refund_status: Option<Spanned<Vec<StatusItem>>>,
}
