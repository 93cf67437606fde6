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
//! The builder builds the config the TOML would hold, in memory, and
//! compiles it with the same checks ([`Policy::from_config`]), so a mistake
//! is a [`ConfigError`] of the file `<builder>`, at no line: a value that
//! does not parse (a rate, a header name, a proxy's CIDR) names the limit
//! or the field and the value; other errors name the limit and the field.

use std::sync::Arc;

use ipnet::IpNet;
use sluice_core::{AlgorithmKind, Rate};
use sluice_policy::config::{Config, LimitConfig, MatchConfig, Spanned};
use sluice_policy::{ConfigError, Engine, KeySource, Policy};

use crate::RateLimitLayer;

/// What errors name as the file.
const ORIGIN: &str = "<builder>";

/// An error of the builder's config, at no line.
fn error(message: String) -> ConfigError {
    ConfigError {
        file: ORIGIN.into(),
        line: 0,
        column: 0,
        message,
    }
}

/// A value of a config built in code, which has no text to point into.
fn unspanned<T>(value: T) -> Spanned<T> {
    Spanned::new(0..0, value)
}

/// One limit, built in code.
#[derive(Debug, Clone)]
pub struct LimitBuilder {
    name: String,
    key: String,
    algorithm: AlgorithmKind,
    rate: String,
    burst: Option<u64>,
    cost: Option<u64>,
    matches: MatchConfig,
    shadow: bool,
}

impl LimitBuilder {
    fn new(name: &str, key: String, rate: &str) -> Self {
        Self {
            name: name.to_owned(),
            key,
            algorithm: AlgorithmKind::TokenBucket,
            rate: rate.to_owned(),
            burst: None,
            cost: None,
            matches: MatchConfig::default(),
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
        self.algorithm = algorithm;
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

    /// The limit's config, as a `[[limits]]` entry would hold it; its rate
    /// and key parsed (an error names the limit, the field and the value).
    fn config(self) -> Result<Spanned<LimitConfig>, ConfigError> {
        let name = &self.name;
        let rate = self
            .rate
            .parse::<Rate>()
            .map_err(|e| error(format!("limit `{name}`: rate `{}`: {e}", self.rate)))?;
        let key = self
            .key
            .parse::<KeySource>()
            .map_err(|e| error(format!("limit `{name}`: key `{}`: {e}", self.key)))?;
        Ok(unspanned(LimitConfig {
            name: Some(self.name),
            algorithm: self.algorithm,
            rate: Some(unspanned(rate)),
            burst: self.burst.map(unspanned),
            key: Some(key),
            matches: unspanned(self.matches),
            cost: self.cost.map(unspanned),
            shadow: self.shadow,
            ..LimitConfig::default()
        }))
    }
}

/// Builds a [`RateLimitLayer`] in code. See the module docs.
#[derive(Debug, Default)]
pub struct LayerBuilder {
    trusted_proxies: Vec<String>,
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
        self.trusted_proxies.push(cidr.to_owned());
        self
    }

    /// The layer, with its own in-memory engine.
    pub fn build(self) -> Result<RateLimitLayer, ConfigError> {
        let policy = self.policy()?;
        Ok(RateLimitLayer::new(Arc::new(Engine::new(policy))))
    }

    /// The policy the layer enforces: the config, compiled.
    fn policy(self) -> Result<Policy, ConfigError> {
        Policy::from_config(ORIGIN, &self.config()?)
    }

    /// The config the TOML would hold: `[client] trusted_proxies` and the
    /// `[[limits]]`.
    fn config(self) -> Result<Config, ConfigError> {
        let mut config = Config::default();
        for cidr in &self.trusted_proxies {
            let net = cidr
                .parse::<IpNet>()
                .map_err(|e| error(format!("client.trusted_proxies: `{cidr}`: {e}")))?;
            config.client.trusted_proxies.push(net);
        }
        config.limits = self
            .limits
            .into_iter()
            .map(LimitBuilder::config)
            .collect::<Result<_, _>>()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use http::{HeaderMap, HeaderValue, Method};
    use sluice_core::ManualClock;
    use sluice_policy::RequestInfo;
    use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

    use super::*;

    fn error_of(builder: LayerBuilder) -> ConfigError {
        match builder.policy() {
            Ok(_) => panic!("the builder's config was accepted"),
            Err(e) => e,
        }
    }

    /// Asserts that `builder` fails, at no line of `<builder>`, with a
    /// message starting with `start`.
    fn assert_refused(builder: LayerBuilder, start: &str) {
        let e = error_of(builder);
        assert_eq!(e.file, std::path::Path::new(ORIGIN), "{e}");
        assert_eq!((e.line, e.column), (0, 0), "{e}");
        assert!(e.message.starts_with(start), "{e}");
    }

    #[test]
    fn a_bad_value_is_a_config_error_naming_the_limit() {
        let one = |l: LimitBuilder| LayerBuilder::default().limit(l);
        assert_refused(
            one(LimitBuilder::per_ip("per-ip", "ten per second")),
            "limit `per-ip`: rate `ten per second`: ",
        );
        assert_refused(
            one(LimitBuilder::per_header("per-key", "X Api", "1/s")),
            "limit `per-key`: key `header:X Api`: `X Api` is not a valid header name",
        );
        assert_refused(
            one(LimitBuilder::global("all", "1/s").burst(1).cost(2)),
            "limit `all`: cost 2 exceeds burst 1",
        );
        assert_refused(
            one(LimitBuilder::global("all", "10/s").burst(0)),
            "limit `all`: burst: ",
        );
        assert_refused(
            one(LimitBuilder::global("bad name", "1/s")),
            "limit name `bad name`: ",
        );
        assert_refused(
            one(LimitBuilder::global("all", "1/s").path_prefix("export")),
            "limit `all`: ",
        );
        assert_refused(
            one(LimitBuilder::global("all", "1/s")).limit(LimitBuilder::per_ip("all", "1/s")),
            "limits: duplicate limit name `all`",
        );
        assert_refused(
            one(LimitBuilder::global("all", "1/s")).trusted_proxy("10.0.0.0/33"),
            "client.trusted_proxies: `10.0.0.0/33`: ",
        );
        assert_refused(LayerBuilder::default(), "no_limits: ");
    }

    const EQUIVALENT_TOML: &str = r#"
        [client]
        trusted_proxies = ["10.0.0.0/8"]

        [[limits]]
        name = "per-ip"
        key = "ip"
        rate = "2/min"
        burst = 3

        [[limits]]
        name = "per-key"
        key = "header:X-Api-Key"
        rate = "4/min"
        cost = 2
        match = { methods = ["POST"] }

        [[limits]]
        name = "export"
        key = "global"
        algorithm = "gcra"
        rate = "1/min"
        match = { path_prefix = "/export" }

        [[limits]]
        name = "watch"
        key = "global"
        algorithm = "fixed_window"
        rate = "1/min"
        shadow = true
    "#;

    fn equivalent_builder() -> LayerBuilder {
        LayerBuilder::default()
            .trusted_proxy("10.0.0.0/8")
            .limit(LimitBuilder::per_ip("per-ip", "2/min").burst(3))
            .limit(
                LimitBuilder::per_header("per-key", "X-Api-Key", "4/min")
                    .cost(2)
                    .methods(&[Method::POST]),
            )
            .limit(
                LimitBuilder::global("export", "1/min")
                    .algorithm(AlgorithmKind::Gcra)
                    .path_prefix("/export"),
            )
            .limit(
                LimitBuilder::global("watch", "1/min")
                    .algorithm(AlgorithmKind::FixedWindow)
                    .shadow(),
            )
    }

    /// One request: method, path, `X-Forwarded-For`, `X-Api-Key`, peer.
    type Request = (
        Method,
        &'static str,
        Option<&'static str>,
        Option<&'static str>,
        [u8; 4],
    );

    fn requests() -> Vec<Request> {
        vec![
            // The same client, directly and behind the trusted proxy.
            (Method::GET, "/", None, None, [203, 0, 113, 5]),
            (Method::GET, "/", Some("203.0.113.5"), None, [10, 1, 2, 3]),
            // Behind an untrusted peer, the header is not believed.
            (
                Method::GET,
                "/",
                Some("203.0.113.5"),
                None,
                [198, 51, 100, 7],
            ),
            (Method::POST, "/", None, Some("key-a"), [192, 0, 2, 1]),
            // The key limit needs its key.
            (Method::POST, "/", None, None, [192, 0, 2, 2]),
            (Method::GET, "/export", None, None, [192, 0, 2, 3]),
            (Method::GET, "/export/x", None, None, [192, 0, 2, 4]),
        ]
    }

    fn engine(policy: Policy, clock: &ManualClock) -> Engine<ManualClock> {
        let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock.clone());
        Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"same"))
    }

    /// What `engine` decides for `r`, as text (verdicts and errors alike).
    fn decide(engine: &Engine<ManualClock>, r: &Request) -> String {
        let (method, path, forwarded, key, peer) = r;
        let mut headers = HeaderMap::new();
        if let Some(f) = forwarded {
            headers.insert("x-forwarded-for", HeaderValue::from_static(f));
        }
        if let Some(k) = key {
            headers.insert("x-api-key", HeaderValue::from_static(k));
        }
        let req = RequestInfo {
            method,
            path,
            headers: &headers,
            peer: Some(IpAddr::from(*peer)),
            cost: None,
            body: None,
        };
        format!("{:?}", engine.decide_now(&req))
    }

    #[test]
    fn the_builders_policy_decides_like_the_same_toml() {
        let built = equivalent_builder().policy().unwrap();
        let parsed = Policy::from_toml("<toml>", EQUIVALENT_TOML).unwrap();
        let ids = |p: &Policy| p.limits().iter().map(|l| l.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&built), ids(&parsed));

        let clock = ManualClock::new(1_000_000_000);
        let (built, parsed) = (engine(built, &clock), engine(parsed, &clock));
        let (mut allowed, mut refused) = (0, 0);
        for _round in 0..3 {
            for r in requests() {
                let (a, b) = (decide(&built, &r), decide(&parsed, &r));
                assert_eq!(a, b, "{r:?}");
                if a.starts_with("Some(Ok(Verdict { allowed: true") {
                    allowed += 1;
                } else {
                    refused += 1;
                }
            }
            clock.advance(20_000_000_000);
        }
        // Both outcomes were compared, not only one.
        assert!(
            allowed > 0 && refused > 0,
            "{allowed} allowed, {refused} refused"
        );
    }
}
