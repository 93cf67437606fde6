//! The policy: a compiled config that turns a request into the limits that
//! apply to it, each with its key and cost.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::{LimitSpec, Limiter};
use toml::Spanned;

use crate::client_ip::TrustedProxies;
use crate::config::{Config, ConfigError, HeadersConfig, LimitConfig, Source};
use crate::key_source::KeySource;

/// A limit, ready to decide.
#[derive(Debug, Clone)]
pub struct LimitDef {
    /// The name shown in headers and problem bodies.
    pub name: Arc<str>,
    /// The identity of the limit's counters: scope, name and definition. A
    /// limit whose definition changes gets fresh counters.
    pub id: String,
    /// The plan the limit belongs to, if any.
    pub plan: Option<String>,
    /// How metrics name it.
    pub labels: Arc<LimitLabels>,
    /// Algorithm, rate and burst.
    pub spec: LimitSpec,
    /// The built algorithm.
    pub limiter: Limiter,
    /// What the limit counts by.
    pub key: KeySource,
    /// Which requests it applies to.
    pub matcher: Matcher,
    /// The cost of one matching request.
    pub cost: u64,
    /// Never refuses: decisions are recorded only.
    pub shadow: bool,
    /// The share of keys (0 to 100) for which the limit is enforced.
    pub enforce_percent: u8,
}

/// How metrics and logs name a limit. Every value comes from the config,
/// so label cardinality is bounded by it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitLabels {
    /// The limit's name.
    pub limit: Arc<str>,
    /// Its plan, or `""`.
    pub plan: Arc<str>,
    /// The requests it applies to: `*`, or methods and a path prefix such as
    /// `POST /export*`.
    pub endpoint: Arc<str>,
}

impl LimitLabels {
    /// Labels of a limit outside any plan, applying to `endpoint`.
    pub fn named(limit: Arc<str>, endpoint: &str) -> Arc<Self> {
        Arc::new(Self {
            limit,
            plan: "".into(),
            endpoint: endpoint.into(),
        })
    }
}

impl Matcher {
    /// The endpoint label: `*`, or methods and a path prefix.
    pub fn describe(&self) -> String {
        let methods: Vec<&str> = self.methods.iter().map(Method::as_str).collect();
        match (methods.is_empty(), &self.path_prefix) {
            (true, None) => "*".to_owned(),
            (true, Some(p)) => format!("{p}*"),
            (false, None) => methods.join(","),
            (false, Some(p)) => format!("{} {p}*", methods.join(",")),
        }
    }
}

/// Request conditions of a limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    methods: Vec<Method>,
    path_prefix: Option<String>,
}

impl Matcher {
    /// Whether a request with this method and path matches.
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        if !self.methods.is_empty() && !self.methods.contains(method) {
            return false;
        }
        match &self.path_prefix {
            None => true,
            Some(prefix) => {
                let p = prefix.trim_end_matches('/');
                path.strip_prefix(p)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || p.is_empty())
            }
        }
    }
}

/// What the policy needs to know of a request.
#[derive(Debug, Clone)]
pub struct RequestInfo<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path, without the query.
    pub path: &'a str,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// The socket peer, or the client IP as reported by a trusted caller.
    pub peer: Option<IpAddr>,
    /// A cost that overrides every limit's configured cost.
    pub cost: Option<u64>,
}

/// A limit that applies to a request.
#[derive(Debug, Clone)]
pub struct Applied<'p> {
    /// The limit.
    pub limit: &'p LimitDef,
    /// Its index in [`Policy::limits`].
    pub index: usize,
    /// The key it counts this request under (raw; stores hash it).
    pub key: Cow<'p, str>,
    /// The cost of this request under it.
    pub cost: u64,
}

/// A request lacks what a limit counts by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit `{limit}` needs a key from `{from}`, which the request lacks")]
pub struct MissingKey {
    /// The limit.
    pub limit: String,
    /// Where its key comes from.
    pub from: KeySource,
}

/// The compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    limits: Vec<LimitDef>,
    global: Vec<usize>,
    plans: BTreeMap<String, Vec<usize>>,
    assignments: HashMap<String, String>,
    default_plan: Option<String>,
    client_key: Option<KeySource>,
    trusted: TrustedProxies,
    /// Header style.
    pub headers: HeadersConfig,
    /// The data plane's address.
    pub listen: SocketAddr,
    /// The control plane's address.
    pub control_listen: SocketAddr,
    /// The upstream, when the data plane is a reverse proxy.
    pub upstream: Option<http::Uri>,
    /// Where the limits' state lives.
    pub store: crate::store_settings::StoreSettings,
    /// The Envoy Rate Limit Service, if configured.
    pub envoy: Option<EnvoySettings>,
    access: crate::config::AccessConfig,
}

/// What the allow and deny lists say of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Decided by the limits.
    Limited,
    /// Never limited, still counted.
    Allowed,
    /// Refused outright.
    Denied,
}

/// The `[envoy]` table, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvoySettings {
    /// The envoyproxy/ratelimit YAML file.
    pub config: std::path::PathBuf,
    /// The gRPC address.
    pub grpc_listen: SocketAddr,
    /// The algorithm of every descriptor limit.
    pub algorithm: sluice_core::AlgorithmKind,
}

impl Policy {
    /// Reads, parses and checks a config file.
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let source = Source::read(path)?;
        let config = source.parse()?;
        Self::compile(&source, &config)
    }

    /// Checks a parsed config and compiles it.
    pub fn compile(source: &Source, config: &Config) -> Result<Self, ConfigError> {
        let err = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);

        let store = crate::store_settings::StoreSettings::from_config(source, &config.store)?;

        let upstream = match &config.upstream {
            None => None,
            Some(u) => Some(parse_upstream(u.get_ref()).map_err(|m| err(u.span(), m))?),
        };

        let mut limits = Vec::new();
        let mut names = HashSet::new();
        let mut global = Vec::new();
        for (i, l) in config.limits.iter().enumerate() {
            let name = l
                .get_ref()
                .name
                .clone()
                .unwrap_or_else(|| format!("limit-{}", i + 1));
            let def = compile_limit(source, l, name, None, None)?;
            if !names.insert(def.name.to_string()) {
                return Err(err(
                    l.span(),
                    format!("limits: duplicate limit name `{}`", def.name),
                ));
            }
            global.push(limits.len());
            limits.push(def);
        }

        let client_key = config.client.key.clone();
        let mut plans = BTreeMap::new();
        for (plan, pc) in &config.plans {
            let mut ids = Vec::new();
            let mut plan_names = HashSet::new();
            for (i, l) in pc.limits.iter().enumerate() {
                let name = l.get_ref().name.clone().unwrap_or_else(|| {
                    if pc.limits.len() == 1 {
                        plan.clone()
                    } else {
                        format!("{plan}-{}", i + 1)
                    }
                });
                if names.contains(&name) || !plan_names.insert(name.clone()) {
                    return Err(err(
                        l.span(),
                        format!("plans.{plan}: duplicate limit name `{name}`"),
                    ));
                }
                let def = compile_limit(source, l, name, Some(plan), client_key.as_ref())?;
                ids.push(limits.len());
                limits.push(def);
            }
            plans.insert(plan.clone(), ids);
        }
        if !plans.is_empty() && client_key.is_none() {
            return Err(source.error_at(
                None,
                "client.key: plans need `[client] key = \"header:<Name>\"` to identify clients",
            ));
        }

        let default_plan = match &config.client.default_plan {
            None => None,
            Some(p) => {
                if !plans.contains_key(p.get_ref()) {
                    return Err(err(
                        p.span(),
                        format!("client.default_plan: no plan named `{}`", p.get_ref()),
                    ));
                }
                Some(p.get_ref().clone())
            }
        };
        let mut assignments = HashMap::new();
        for (key, plan) in &config.keys {
            if !plans.contains_key(plan.get_ref()) {
                return Err(err(
                    plan.span(),
                    format!("keys: no plan named `{}`", plan.get_ref()),
                ));
            }
            assignments.insert(key.clone(), plan.get_ref().clone());
        }

        Ok(Self {
            limits,
            global,
            plans,
            assignments,
            default_plan,
            client_key,
            trusted: TrustedProxies::new(config.client.trusted_proxies.clone()),
            headers: config.headers,
            listen: config.listen,
            control_listen: config.control_listen,
            upstream,
            store,
            access: config.access.clone(),
            envoy: config.envoy.as_ref().map(|e| {
                let dir = source.file.parent().unwrap_or(std::path::Path::new(""));
                EnvoySettings {
                    config: dir.join(e.config.get_ref()),
                    grpc_listen: e.grpc_listen,
                    algorithm: e.algorithm,
                }
            }),
        })
    }

    /// Every limit of the policy.
    pub fn limits(&self) -> &[LimitDef] {
        &self.limits
    }

    /// The client address of a request from `peer`, per the trusted proxies.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        self.trusted.client_ip(peer, headers)
    }

    /// The plan of a client key.
    pub fn plan_of(&self, key: &str) -> Option<&str> {
        self.assignments
            .get(key)
            .or(self.default_plan.as_ref())
            .map(String::as_str)
    }

    /// What the allow and deny lists say of a request. A deny entry beats an
    /// allow entry.
    pub fn access(&self, req: &RequestInfo<'_>) -> Access {
        let a = &self.access;
        if a.allow_keys.is_empty()
            && a.allow_cidrs.is_empty()
            && a.deny_keys.is_empty()
            && a.deny_cidrs.is_empty()
        {
            return Access::Limited;
        }
        let key = self
            .client_key
            .as_ref()
            .and_then(|source| key_of(source, req, &self.trusted));
        let ip = req
            .peer
            .map(|peer| self.trusted.client_ip(peer, req.headers));
        let listed = |keys: &[String], nets: &[ipnet::IpNet]| {
            key.as_deref().is_some_and(|k| keys.iter().any(|x| x == k))
                || ip.is_some_and(|ip| nets.iter().any(|n| n.contains(&ip)))
        };
        if listed(&a.deny_keys, &a.deny_cidrs) {
            Access::Denied
        } else if listed(&a.allow_keys, &a.allow_cidrs) {
            Access::Allowed
        } else {
            Access::Limited
        }
    }

    /// Whether the config's `[keys]` assigns this key.
    pub fn assigned_in_config(&self, key: &str) -> bool {
        self.assignments.contains_key(key)
    }

    /// Whether a plan of that name exists.
    pub fn has_plan(&self, plan: &str) -> bool {
        self.plans.contains_key(plan)
    }

    /// The limits that apply to a request, with their keys and costs.
    pub fn resolve<'p>(&'p self, req: &RequestInfo<'p>) -> Result<Vec<Applied<'p>>, MissingKey> {
        self.resolve_with(req, |_| None)
    }

    /// [`resolve`](Self::resolve), with runtime plan assignments that take
    /// precedence over the config's: `runtime(key)` names a key's plan.
    /// An assignment to a plan this policy lacks is ignored.
    pub fn resolve_with<'p>(
        &'p self,
        req: &RequestInfo<'p>,
        runtime: impl Fn(&str) -> Option<&'p str>,
    ) -> Result<Vec<Applied<'p>>, MissingKey> {
        let client_key = self
            .client_key
            .as_ref()
            .and_then(|source| key_of(source, req, &self.trusted));
        let plan = client_key.as_deref().and_then(|k| {
            runtime(k)
                .and_then(|p| self.plans.get(p))
                .or_else(|| self.plan_of(k).and_then(|p| self.plans.get(p)))
        });

        let mut applied = Vec::new();
        let candidates = self.global.iter().chain(plan.into_iter().flatten());
        for &i in candidates {
            let limit = &self.limits[i];
            if !limit.matcher.matches(req.method, req.path) {
                continue;
            }
            let key = key_of(&limit.key, req, &self.trusted).ok_or_else(|| MissingKey {
                limit: limit.name.to_string(),
                from: limit.key.clone(),
            })?;
            applied.push(Applied {
                limit,
                index: i,
                key,
                cost: req.cost.unwrap_or(limit.cost),
            });
        }
        // A client without a key, where plans exist, cannot be placed in one.
        if let (None, Some(plan), Some(source)) =
            (&client_key, &self.default_plan, &self.client_key)
        {
            return Err(MissingKey {
                limit: plan.clone(),
                from: source.clone(),
            });
        }
        Ok(applied)
    }
}

fn key_of<'a>(
    source: &KeySource,
    req: &RequestInfo<'a>,
    trusted: &TrustedProxies,
) -> Option<Cow<'a, str>> {
    match source {
        KeySource::Global => Some(Cow::Borrowed("")),
        KeySource::Ip => req
            .peer
            .map(|peer| Cow::Owned(trusted.client_ip(peer, req.headers).to_string())),
        KeySource::Header(name) => req
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(Cow::Borrowed),
    }
}

fn parse_upstream(text: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = text
        .parse()
        .map_err(|e| format!("upstream: `{text}` is not a URL: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!(
            "upstream: `{text}` must be an http:// URL with a host, e.g. \"http://127.0.0.1:8000\""
        ));
    }
    Ok(uri)
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'))
}

fn compile_limit(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: String,
    plan: Option<&String>,
    client_key: Option<&KeySource>,
) -> Result<LimitDef, ConfigError> {
    let c = l.get_ref();
    let at = |msg: String| source.error_at(Some(l.span()), msg);
    let at_span = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    if !valid_name(&name) {
        return Err(at(format!(
            "limit name `{name}`: use 1 to 64 letters, digits, `-`, `_`, `.`, `:` or `/`"
        )));
    }
    let rate = *c.rate.get_ref();
    let spec = LimitSpec {
        algorithm: c.algorithm,
        rate,
        burst: c.burst.as_ref().map_or(rate.amount(), |b| *b.get_ref()),
        nodelay: c.nodelay,
    };
    // A bad burst is reported at the burst, or at the rate it defaults from.
    let burst_span = c.burst.as_ref().map_or(c.rate.span(), Spanned::span);
    let limiter = spec
        .build()
        .map_err(|e| at_span(burst_span.clone(), format!("limit `{name}`: burst: {e}")))?;
    let cost = c.cost.as_ref().map_or(1, |c| *c.get_ref());
    if cost > spec.burst {
        let span = c.cost.as_ref().map_or(burst_span, Spanned::span);
        return Err(at_span(
            span,
            format!(
                "limit `{name}`: cost {cost} exceeds burst {}: no matching request could ever pass",
                spec.burst
            ),
        ));
    }
    let enforce_percent = match &c.enforce_percent {
        None => 100,
        Some(p) if *p.get_ref() <= 100 => *p.get_ref(),
        Some(p) => {
            return Err(at_span(
                p.span(),
                format!("limit `{name}`: enforce_percent must be between 0 and 100"),
            ));
        }
    };
    let key = match (&c.key, client_key) {
        (Some(k), _) => k.clone(),
        (None, Some(k)) if plan.is_some() => k.clone(),
        (None, _) => {
            return Err(at(format!(
                "limit `{name}`: missing field `key` (\"ip\", \"global\" or \"header:<Name>\")"
            )));
        }
    };
    let matches = c.matches.get_ref();
    let at_match = |msg: String| at_span(c.matches.span(), msg);
    let mut methods = Vec::new();
    for m in &matches.methods {
        let method = Method::from_bytes(m.to_ascii_uppercase().as_bytes()).map_err(|_| {
            at_match(format!(
                "limit `{name}`: match.methods: `{m}` is not an HTTP method"
            ))
        })?;
        methods.push(method);
    }
    if let Some(p) = matches.path_prefix.as_ref().filter(|p| !p.starts_with('/')) {
        return Err(at_match(format!(
            "limit `{name}`: match.path_prefix `{p}` must start with `/`"
        )));
    }
    let scope = plan.map_or_else(|| "limit".to_owned(), |p| format!("plan:{p}"));
    let id = format!(
        "{scope}/{name}/{}/{}/{}/{}",
        spec.algorithm.name(),
        spec.rate,
        spec.burst,
        spec.nodelay
    );
    let matcher = Matcher {
        methods,
        path_prefix: matches.path_prefix.clone(),
    };
    let name: Arc<str> = name.into();
    let labels = Arc::new(LimitLabels {
        limit: name.clone(),
        plan: plan.map_or("", String::as_str).into(),
        endpoint: matcher.describe().into(),
    });
    Ok(LimitDef {
        name,
        id,
        plan: plan.cloned(),
        labels,
        spec,
        limiter,
        key,
        matcher,
        cost,
        shadow: c.shadow,
        enforce_percent,
    })
}

impl Policy {
    /// Parses and checks a config given as TOML text; `name` stands for the
    /// file in error messages.
    ///
    /// ```
    /// let policy = sluice_policy::Policy::from_toml(
    ///     "inline.toml",
    ///     r#"
    ///         [[limits]]
    ///         name = "per-ip"
    ///         key = "ip"
    ///         rate = "10/s"
    ///         burst = 20
    ///     "#,
    /// )
    /// .unwrap();
    /// assert_eq!(policy.limits().len(), 1);
    /// ```
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        let source = Source {
            file: name.into(),
            text: text.to_owned(),
        };
        let config = source.parse()?;
        Self::compile(&source, &config)
    }
}
