//! Configuring the tower layer in code instead of TOML.
//!
//! ```
//! use sluice_http::RateLimitLayer;
//! use sluice_http::layer_builder::LimitBuilder;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let layer = RateLimitLayer::builder()
//!     .limit(LimitBuilder::per_ip("ip-guard", "100/s").burst(200))
//!     .limit(LimitBuilder::per_header("per-key", "X-Api-Key", "10/s").burst(20))
//!     .limit(LimitBuilder::per_header("export", "X-Api-Key", "2/min").path_prefix("/export"))
//!     .trusted_proxy("10.0.0.0/8")
//!     .build()?;
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "hello" }))
//!     .layer(layer);
//! # let _ = app;
//! # Ok(()) }
//! ```
//!
//! The builder writes the same config the TOML would hold and compiles it
//! with the same checks, so a mistake is a [`ConfigError`]: a rate that does
//! not parse names the limit; other errors name the field.

use serde::Serialize;
use sluice_core::AlgorithmKind;
use sluice_policy::{ConfigError, Policy};

use crate::RateLimitLayer;

/// One limit, built in code.
#[derive(Debug, Clone, Serialize)]
pub struct LimitBuilder {
    name: String,
    key: String,
    algorithm: &'static str,
    rate: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    burst: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost: Option<u64>,
    #[serde(rename = "match", skip_serializing_if = "Match::is_empty")]
    matches: Match,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    shadow: bool,
}

#[derive(Debug, Clone, Default, Serialize)]
struct Match {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    methods: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    path_prefix: Option<String>,
}

impl Match {
    fn is_empty(&self) -> bool {
        self.methods.is_empty() && self.path_prefix.is_none()
    }
}

impl LimitBuilder {
    fn new(name: &str, key: String, rate: &str) -> Self {
        Self {
            name: name.to_owned(),
            key,
            algorithm: AlgorithmKind::TokenBucket.name(),
            rate: rate.to_owned(),
            burst: None,
            cost: None,
            matches: Match::default(),
            shadow: false,
        }
    }

    /// A limit per client IP (the socket peer, or the right-most untrusted
    /// `X-Forwarded-For` hop behind a trusted proxy), at `rate` such as
    /// `"10/s"`.
    pub fn per_ip(name: &str, rate: &str) -> Self {
        Self::new(name, "ip".to_owned(), rate)
    }

    /// A limit per value of a request header, such as an API key.
    pub fn per_header(name: &str, header: &str, rate: &str) -> Self {
        Self::new(name, format!("header:{header}"), rate)
    }

    /// One limit shared by every request.
    pub fn global(name: &str, rate: &str) -> Self {
        Self::new(name, "global".to_owned(), rate)
    }

    /// The most cost admitted at once (the rate's amount by default).
    pub fn burst(mut self, burst: u64) -> Self {
        self.burst = Some(burst);
        self
    }

    /// The algorithm (token bucket by default).
    pub fn algorithm(mut self, algorithm: AlgorithmKind) -> Self {
        self.algorithm = algorithm.name();
        self
    }

    /// The cost of one matching request (1 by default).
    pub fn cost(mut self, cost: u64) -> Self {
        self.cost = Some(cost);
        self
    }

    /// Applies only to paths starting with `prefix`.
    pub fn path_prefix(mut self, prefix: &str) -> Self {
        self.matches.path_prefix = Some(prefix.to_owned());
        self
    }

    /// Applies only to these methods.
    pub fn methods(mut self, methods: &[http::Method]) -> Self {
        self.matches.methods = methods.iter().map(ToString::to_string).collect();
        self
    }

    /// Decides and records, but never refuses.
    pub fn shadow(mut self) -> Self {
        self.shadow = true;
        self
    }
}

#[derive(Debug, Default, Serialize)]
struct Client {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    trusted_proxies: Vec<String>,
}

/// Builds a [`RateLimitLayer`] in code. See the module docs.
#[derive(Debug, Default, Serialize)]
pub struct LayerBuilder {
    client: Client,
    limits: Vec<LimitBuilder>,
}

impl LayerBuilder {
    /// Adds a limit; a request must pass every limit that applies to it.
    pub fn limit(mut self, limit: LimitBuilder) -> Self {
        self.limits.push(limit);
        self
    }

    /// Believes `X-Forwarded-For`/`Forwarded` from peers in `cidr`, such as
    /// `"10.0.0.0/8"`.
    pub fn trusted_proxy(mut self, cidr: &str) -> Self {
        self.client.trusted_proxies.push(cidr.to_owned());
        self
    }

    /// The layer, with its own in-memory engine.
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        let error = |message: String| ConfigError {
            file: "<builder>".into(),
            line: 0,
            column: 0,
            message,
        };
        for l in &self.limits {
            l.rate
                .parse::<sluice_core::Rate>()
                .map_err(|e| error(format!("limit `{}`: rate `{}`: {e}", l.name, l.rate)))?;
        }
        let text = toml::to_string(&self).map_err(|e| {
            // Every field is a string or number; this cannot fail in
            // practice, but a typed error is better than a panic.
            error(format!("cannot write the config: {e}"))
        })?;
        let policy = Policy::from_toml("<builder>", &text)?;
        Ok(RateLimitLayer::new(std::sync::Arc::new(
            sluice_policy::Engine::new(policy),
        )))
    }
}
