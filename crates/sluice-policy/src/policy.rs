//! The policy: a compiled config that turns a request into the limits that
//! apply to it, each with its key and cost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::LimitSpec;
use sluice_store::seam::CounterDef;
use toml::Spanned;

use crate::client_ip::TrustedProxies;
use crate::config::{
    BucketConfig, CarryOver, Config, ConfigError, HeadersConfig, LimitConfig, OnLimitConfig,
    PlanConfig, Source,
};
use crate::key_source::KeySource;
use crate::key_text::KeyText;
use crate::keys_file::KeysFile;
pub use crate::limit::{DelayDef, Limit, LimitLabels};
pub use crate::matcher::Matcher;

/// A limit of the config, ready to decide: the compiled [`Limit`] the
/// engine decides, and what the policy matches and keys it by.
#[derive(Debug, Clone)]
pub struct LimitDef {
    /// What the engine decides, whatever the adapter.
    pub limit: Limit,
    /// The identity of the limit's counters: scope, name and definition. A
    /// limit whose definition changes gets fresh counters.
    pub id: String,
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

/// A `bucket = "shared"` plan rule: matching requests cost `cost` on the
/// plan's main limits (those without a `match`) instead of counting on a
/// bucket of their own.
#[derive(Debug, Clone)]
pub struct CostRule {
    /// The rule's name (for logs).
    pub name: String,
    /// Which requests it prices.
    pub matcher: Matcher,
    /// What one matching request costs on the plan's main limits.
    pub cost: u64,
}

/// `[client] runtime_keys_file`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeKeysFile {
    /// Where the assignments are saved.
    pub path: std::path::PathBuf,
    /// What the file held when the policy was loaded (plans the policy lacks
    /// included: they are ignored while it lacks them).
    pub loaded: Vec<(String, String)>,
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
    pub key: KeyText<'p>,
    /// The cost of this request under it.
    pub cost: u64,
}

/// The limits that apply to one request, inline for the usual few (no
/// allocation on the request path).
pub type AppliedLimits<'p> = smallvec::SmallVec<[Applied<'p>; 4]>;

/// A request lacks what a limit counts by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("limit `{limit}` needs a key from `{from}`, which the request lacks")]
pub struct MissingKey {
    /// The limit.
    pub limit: String,
    /// Where its key comes from.
    pub from: KeySource,
}

/// A request carries a key header more than once, with different values:
/// which client it is depends on which one is read (an upstream reading the
/// last would see another identity than the limit counted), so it is
/// refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the request has more than one `{from}` value, so which client it is is ambiguous")]
pub struct AmbiguousKey {
    /// Where the key comes from.
    pub from: KeySource,
}

/// Why a request's limits could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A limit's key is missing.
    #[error(transparent)]
    Missing(#[from] MissingKey),
    /// A key header is given twice, with different values.
    #[error(transparent)]
    Ambiguous(#[from] AmbiguousKey),
}

/// The compiled policy.
#[derive(Debug, Clone)]
pub struct Policy {
    limits: Vec<LimitDef>,
    global: Vec<usize>,
    plans: BTreeMap<String, Vec<usize>>,
    cost_rules: BTreeMap<String, Vec<CostRule>>,
    assignments: HashMap<String, String>,
    /// `[client] keys_file`, resolved against the config's folder.
    pub keys_file: Option<std::path::PathBuf>,
    /// `[client] runtime_keys_file`, resolved and read.
    pub runtime_keys: Option<RuntimeKeysFile>,
    /// What a key that changes plan keeps of its used quota.
    pub carry_over: CarryOver,
    default_plan: Option<String>,
    client_key: Option<KeySource>,
    trusted: TrustedProxies,
    /// Header style.
    pub headers: HeadersConfig,
    /// Account-manager events.
    pub events: crate::events::EventSettings,
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

        // The deployment settings are the binary's, read at start only, but
        // a config with a bad one is refused whoever loads it.
        crate::deployment::Deployment::compile(source, config)?;

        let mut limits = Vec::new();
        let mut names = HashSet::new();
        let mut global = Vec::new();
        for (i, l) in config.limits.iter().enumerate() {
            let name = l
                .get_ref()
                .name
                .clone()
                .unwrap_or_else(|| format!("limit-{}", i + 1));
            if let Some(b) = l
                .get_ref()
                .bucket
                .as_ref()
                .filter(|b| *b.get_ref() == BucketConfig::Shared)
            {
                return Err(err(
                    b.span(),
                    format!(
                        "limit `{name}`: bucket = \"shared\" draws from a plan's bucket, so it belongs in a plan's limits"
                    ),
                ));
            }
            let def = compile_limit(source, l, name, None, None, None, &config.plans)?;
            if !names.insert(def.limit.name.to_string()) {
                return Err(err(
                    l.span(),
                    format!("limits: duplicate limit name `{}`", def.limit.name),
                ));
            }
            global.push(limits.len());
            limits.push(def);
        }

        let client_key = config.client.key.clone();
        let mut plans = BTreeMap::new();
        let mut cost_rules = BTreeMap::new();
        for (plan, pc) in &config.plans {
            let mut ids = Vec::new();
            let mut rules = Vec::new();
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
                if l.get_ref().bucket.as_ref().map(|b| *b.get_ref()) == Some(BucketConfig::Shared) {
                    rules.push((compile_cost_rule(source, l, name)?, l.span()));
                    continue;
                }
                let def = compile_limit(
                    source,
                    l,
                    name,
                    Some(plan),
                    client_key.as_ref(),
                    Some(pc),
                    &config.plans,
                )?;
                ids.push(limits.len());
                limits.push(def);
            }
            let main: Vec<&LimitDef> = ids
                .iter()
                .map(|&i| &limits[i])
                .filter(|l: &&LimitDef| l.matcher.is_any())
                .collect();
            for (rule, span) in &rules {
                if main.is_empty() {
                    return Err(err(
                        span.clone(),
                        format!(
                            "plans.{plan}: rule `{}` has bucket = \"shared\", which charges the plan's main limits (those without a `match`), and this plan has none",
                            rule.name
                        ),
                    ));
                }
                if let Some(l) = main.iter().find(|l| rule.cost > l.limit.spec.burst) {
                    return Err(err(
                        span.clone(),
                        format!(
                            "plans.{plan}: rule `{}`: cost {} exceeds the burst {} of limit `{}`: no matching request could ever pass",
                            rule.name, rule.cost, l.limit.spec.burst, l.limit.name
                        ),
                    ));
                }
            }
            plans.insert(plan.clone(), ids);
            cost_rules.insert(plan.clone(), rules.into_iter().map(|(r, _)| r).collect());
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
        let dir = source.file.parent().unwrap_or(std::path::Path::new(""));
        let keys_file = match &config.client.keys_file {
            None => None,
            Some(f) => {
                let path = dir.join(f.get_ref());
                let file = KeysFile::read(&path, false).map_err(|e| {
                    if e.line == 0 {
                        err(f.span(), format!("client.keys_file: {e}"))
                    } else {
                        e
                    }
                })?;
                for entry in &file.entries {
                    if !plans.contains_key(&entry.plan) {
                        return Err(file.source.error_at(
                            Some(entry.plan_span.clone()),
                            format!("no plan named `{}`", entry.plan),
                        ));
                    }
                    assignments.insert(entry.key.clone(), entry.plan.clone());
                }
                Some(path)
            }
        };
        let runtime_keys = match &config.client.runtime_keys_file {
            None => None,
            Some(f) => {
                let path = dir.join(f.get_ref());
                let file = KeysFile::read(&path, true).map_err(|e| {
                    if e.line == 0 {
                        err(f.span(), format!("client.runtime_keys_file: {e}"))
                    } else {
                        e
                    }
                })?;
                Some(RuntimeKeysFile {
                    path,
                    loaded: file.entries.into_iter().map(|e| (e.key, e.plan)).collect(),
                })
            }
        };

        refuse_no_limits(source, config, &limits)?;
        Ok(Self {
            limits,
            global,
            plans,
            cost_rules,
            assignments,
            keys_file,
            runtime_keys,
            carry_over: config.client.carry_over,
            default_plan,
            client_key,
            trusted: TrustedProxies::new(config.client.trusted_proxies.clone())
                .with_ipv6_prefix(ipv6_prefix(source, &config.client)?),
            headers: config.headers,
            access: config.access.clone(),
            events: crate::events::EventSettings::from_config(source, config)?,
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

    /// The network that identifies the client of a request from `peer`:
    /// its IPv4 address, or its IPv6 address's `client.ipv6_prefix`.
    pub fn client_net(&self, peer: IpAddr, headers: &HeaderMap) -> ipnet::IpNet {
        self.trusted.client_net(peer, headers)
    }

    /// Whether `ip` is a trusted proxy.
    pub fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted.trusts(ip)
    }

    /// The network that identifies a client at `ip`, without headers (the
    /// unit of per-address connection caps).
    pub fn network_of(&self, ip: IpAddr) -> ipnet::IpNet {
        self.trusted.network_of(ip)
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
        // An ambiguous key is no key here; deciding refuses it.
        let key = self
            .client_key
            .as_ref()
            .and_then(|source| key_of(source, req, &self.trusted).ok().flatten());
        // The client's network (an IPv6 client's /64, by default): it is
        // denied if a deny entry covers any of it, and allowed only if an
        // allow entry covers all of it.
        let net = req
            .peer
            .map(|peer| self.trusted.client_net(peer, req.headers));
        let key_listed =
            |keys: &[String]| key.as_deref().is_some_and(|k| keys.iter().any(|x| x == k));
        let denied_net =
            net.is_some_and(|c| a.deny_cidrs.iter().any(|n| n.contains(&c) || c.contains(n)));
        let allowed_net = net.is_some_and(|c| a.allow_cidrs.iter().any(|n| n.contains(&c)));
        if key_listed(&a.deny_keys) || denied_net {
            Access::Denied
        } else if key_listed(&a.allow_keys) || allowed_net {
            Access::Allowed
        } else {
            Access::Limited
        }
    }

    /// Whether the config's `[keys]` assigns this key.
    pub fn assigned_in_config(&self, key: &str) -> bool {
        self.assignments.contains_key(key)
    }

    /// The names of the plans, in order.
    pub fn plan_names(&self) -> impl Iterator<Item = &str> {
        self.plans.keys().map(String::as_str)
    }

    /// Whether a plan of that name exists.
    pub fn has_plan(&self, plan: &str) -> bool {
        self.plans.contains_key(plan)
    }

    /// The indices (into [`Policy::limits`]) of a plan's limits with a
    /// counter of their own, in config order; empty for an unknown plan.
    pub fn plan_limits(&self, plan: &str) -> &[usize] {
        self.plans.get(plan).map_or(&[], Vec::as_slice)
    }

    /// A plan's `bucket = "shared"` rules.
    pub fn cost_rules(&self, plan: &str) -> &[CostRule] {
        self.cost_rules.get(plan).map_or(&[], Vec::as_slice)
    }

    /// The client key source (`[client] key`).
    pub fn client_key(&self) -> Option<&KeySource> {
        self.client_key.as_ref()
    }

    /// Who a request is from, as the limits name the client: the key its
    /// `[client] key` gives (the network of its IP for `ip`, the empty key
    /// for `global`), or, without one, its network. `None` when it lacks
    /// the key or gives it ambiguously.
    pub fn client_of<'a>(&self, req: &RequestInfo<'a>) -> Option<KeyText<'a>> {
        let ip = KeySource::Ip;
        let source = self.client_key.as_ref().unwrap_or(&ip);
        key_of(source, req, &self.trusted).ok().flatten()
    }

    /// The limits that apply to a request, with their keys and costs.
    pub fn resolve<'p>(&'p self, req: &RequestInfo<'p>) -> Result<AppliedLimits<'p>, KeyError> {
        self.resolve_with(req, |_| None)
    }

    /// The plan of a client key, with runtime assignments (`runtime(key)`)
    /// over the config's; a runtime plan this policy lacks is ignored.
    pub fn plan_with<'p>(
        &'p self,
        key: &str,
        runtime: &impl Fn(&str) -> Option<&'p str>,
    ) -> Option<&'p str> {
        runtime(key)
            .filter(|p| self.plans.contains_key(*p))
            .or_else(|| self.plan_of(key))
    }

    /// The plan of the client making a request (its priority class).
    pub fn client_plan<'p>(
        &'p self,
        req: &RequestInfo<'_>,
        runtime: &impl Fn(&str) -> Option<&'p str>,
    ) -> Option<&'p str> {
        let source = self.client_key.as_ref()?;
        let key = key_of(source, req, &self.trusted).ok()??;
        self.plan_with(&key, runtime)
    }

    /// [`resolve`](Self::resolve), with runtime plan assignments that take
    /// precedence over the config's: `runtime(key)` names a key's plan.
    /// An assignment to a plan this policy lacks is ignored.
    pub fn resolve_with<'p>(
        &'p self,
        req: &RequestInfo<'p>,
        runtime: impl Fn(&str) -> Option<&'p str>,
    ) -> Result<AppliedLimits<'p>, KeyError> {
        let mut applied = AppliedLimits::new();
        self.resolve_each(req, runtime, |a| {
            applied.push(a.clone());
            Ok::<_, KeyError>(())
        })?;
        Ok(applied)
    }

    /// [`resolve_with`](Self::resolve_with), showing each applied limit to
    /// `visit` in order instead of collecting them (the engine plans each
    /// as it comes, and keeps only the key's hash). Stops at the first
    /// error, of `visit` or of a missing or ambiguous key; `visit` may have
    /// seen some limits by then.
    pub fn resolve_each<'p, E: From<MissingKey> + From<AmbiguousKey>>(
        &'p self,
        req: &RequestInfo<'p>,
        runtime: impl Fn(&str) -> Option<&'p str>,
        mut visit: impl FnMut(&Applied<'p>) -> Result<(), E>,
    ) -> Result<(), E> {
        let client_key = match &self.client_key {
            Some(source) => key_of(source, req, &self.trusted)?,
            None => None,
        };
        let plan_name = client_key
            .as_deref()
            .and_then(|k| self.plan_with(k, &runtime));
        let plan = plan_name.and_then(|p| self.plans.get(p));
        // The first matching `bucket = "shared"` rule prices the request on
        // the plan's main limits.
        let shared_cost = plan_name
            .and_then(|p| self.cost_rules.get(p))
            .and_then(|rules| {
                rules
                    .iter()
                    .find(|r| r.matcher.matches_request(req.method, req.path, req.headers))
            })
            .map(|r| r.cost);

        let candidates = self.global.iter().chain(plan.into_iter().flatten());
        for &i in candidates {
            let limit = &self.limits[i];
            if !limit
                .matcher
                .matches_request(req.method, req.path, req.headers)
            {
                continue;
            }
            let configured = match shared_cost {
                Some(cost) if limit.limit.plan.is_some() && limit.matcher.is_any() => cost,
                _ => limit.cost,
            };
            let key = key_of(&limit.key, req, &self.trusted)?.ok_or_else(|| MissingKey {
                limit: limit.limit.name.to_string(),
                from: limit.key.clone(),
            })?;
            visit(&Applied {
                limit,
                index: i,
                key,
                cost: req.cost.unwrap_or(configured),
            })?;
        }
        // A client without a key, where plans exist, cannot be placed in one.
        if let (None, Some(plan), Some(source)) =
            (&client_key, &self.default_plan, &self.client_key)
        {
            return Err(MissingKey {
                limit: plan.clone(),
                from: source.clone(),
            }
            .into());
        }
        Ok(())
    }
}

/// The key a source gives a request: `None` when it lacks one, an error
/// when a key header is given twice with different values.
fn key_of<'a>(
    source: &KeySource,
    req: &RequestInfo<'a>,
    trusted: &TrustedProxies,
) -> Result<Option<KeyText<'a>>, AmbiguousKey> {
    Ok(match source {
        KeySource::Global => Some(KeyText::Borrowed("")),
        KeySource::Ip => req
            .peer
            .map(|peer| KeyText::net(trusted.client_net(peer, req.headers))),
        KeySource::Header(name) => {
            let text = |v: &'a http::HeaderValue| v.to_str().ok().map(str::trim);
            let first = req.headers.get(name).and_then(text);
            // A map with as many values as names repeats no field: the
            // usual case, decided without walking the field's values.
            if req.headers.len() != req.headers.keys_len()
                && req.headers.get_all(name).iter().any(|v| text(v) != first)
            {
                return Err(AmbiguousKey {
                    from: source.clone(),
                });
            }
            first.filter(|v| !v.is_empty()).map(KeyText::Borrowed)
        }
    })
}

/// `client.ipv6_prefix`: 1 to 128.
fn ipv6_prefix(source: &Source, client: &crate::config::ClientConfig) -> Result<u8, ConfigError> {
    match &client.ipv6_prefix {
        None => Ok(crate::client_ip::DEFAULT_IPV6_PREFIX),
        Some(p) if (1..=128).contains(p.get_ref()) => Ok(*p.get_ref()),
        Some(p) => Err(source.error_at(
            Some(p.span()),
            format!(
                "client.ipv6_prefix: {} is not a prefix length from 1 to 128",
                p.get_ref()
            ),
        )),
    }
}

/// A config that limits nothing, which is most often an empty or
/// half-written file, is refused unless it says `no_limits = true`. (With
/// `[envoy]`, the limits come from its YAML.)
fn refuse_no_limits(
    source: &Source,
    config: &Config,
    limits: &[LimitDef],
) -> Result<(), ConfigError> {
    if limits.is_empty() && config.envoy.is_none() && !config.no_limits {
        return Err(source.error_at(
            Some(0..0),
            "no_limits: this config defines no limits, so Sluice would limit nothing; \
             if that is intended, put `no_limits = true` at the top of the file",
        ));
    }
    Ok(())
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
    plan_config: Option<&PlanConfig>,
    all_plans: &BTreeMap<String, PlanConfig>,
) -> Result<LimitDef, ConfigError> {
    let c = l.get_ref();
    let at = |msg: String| source.error_at(Some(l.span()), msg);
    let at_span = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    if !valid_name(&name) {
        return Err(at(format!(
            "limit name `{name}`: use 1 to 64 letters, digits, `-`, `_`, `.`, `:` or `/`"
        )));
    }
    let Some(rate_field) = &c.rate else {
        return Err(at(format!(
            "limit `{name}`: missing field `rate` (e.g. \"10/s\")"
        )));
    };
    let rate = *rate_field.get_ref();
    let spec = LimitSpec {
        algorithm: c.algorithm,
        rate,
        burst: c.burst.as_ref().map_or(rate.amount(), |b| *b.get_ref()),
        nodelay: c.nodelay,
    };
    // A bad burst is reported at the burst, or at the rate it defaults from.
    let burst_span = c.burst.as_ref().map_or(rate_field.span(), Spanned::span);
    spec.build()
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
    let matcher = Matcher::compile(c.matches.get_ref())
        .map_err(|m| at_span(c.matches.span(), format!("limit `{name}`: {m}")))?;
    let delay = compile_delay(source, l, &name, &spec, plan_config)?;
    let mut max_share = BTreeMap::new();
    if let Some(shares) = &c.max_share {
        for (class, percent) in shares.get_ref() {
            if !all_plans.contains_key(class) {
                return Err(at_span(
                    shares.span(),
                    format!("limit `{name}`: max_share: no plan named `{class}`"),
                ));
            }
            if !(1..=100).contains(percent) {
                return Err(at_span(
                    shares.span(),
                    format!(
                        "limit `{name}`: max_share: {class} = {percent}: a share is a percentage from 1 to 100"
                    ),
                ));
            }
            if *percent < 100 {
                max_share.insert(class.clone(), *percent);
            }
        }
    }
    let scope = plan.map_or_else(|| "limit".to_owned(), |p| format!("plan:{p}"));
    let mut id = format!(
        "{scope}/{name}/{}/{}/{}/{}",
        spec.algorithm.name(),
        spec.rate,
        spec.burst,
        spec.nodelay
    );
    if let Some(d) = &delay {
        id.push_str(&format!("/delay:{}", d.max_delay));
    }
    let counted_spec = delay.as_ref().map_or(spec, |d| d.spec);
    let counted = CounterDef::new(&id, counted_spec)
        .map_err(|e| at_span(l.span(), format!("limit `{name}`: {e}")))?;
    let name: Arc<str> = name.into();
    let labels = Arc::new(LimitLabels {
        limit: name.clone(),
        plan: plan.map_or("", String::as_str).into(),
        endpoint: matcher.describe().into(),
    });
    Ok(LimitDef {
        limit: Limit {
            name,
            labels,
            spec,
            counted,
            delay,
            max_share,
            plan: plan.cloned(),
        },
        id,
        key,
        matcher,
        cost,
        shadow: c.shadow,
        enforce_percent,
    })
}

/// `on_limit`, `max_delay` and `max_queue` of a limit, or of its plan.
fn compile_delay(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
    spec: &LimitSpec,
    plan: Option<&PlanConfig>,
) -> Result<Option<DelayDef>, ConfigError> {
    let c = l.get_ref();
    let at = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    let on_limit = c
        .on_limit
        .as_ref()
        .or(plan.and_then(|p| p.on_limit.as_ref()));
    let max_delay = c
        .max_delay
        .as_ref()
        .or(plan.and_then(|p| p.max_delay.as_ref()));
    let max_queue = c
        .max_queue
        .as_ref()
        .or(plan.and_then(|p| p.max_queue.as_ref()));
    let Some(on_limit) = on_limit.filter(|o| *o.get_ref() == OnLimitConfig::Delay) else {
        if let Some(field) = c
            .max_delay
            .as_ref()
            .map(Spanned::span)
            .or(c.max_queue.as_ref().map(Spanned::span))
        {
            return Err(at(
                field,
                format!("limit `{name}`: max_delay and max_queue need on_limit = \"delay\""),
            ));
        }
        return Ok(None);
    };
    if !matches!(
        spec.algorithm,
        sluice_core::AlgorithmKind::TokenBucket | sluice_core::AlgorithmKind::Gcra
    ) {
        return Err(at(
            on_limit.span(),
            format!(
                "limit `{name}`: on_limit = \"delay\" needs algorithm token_bucket or gcra, not {} (a leaky_bucket without nodelay already delays: its burst is the queue)",
                spec.algorithm.name()
            ),
        ));
    }
    let Some(max_delay) = max_delay else {
        return Err(at(
            on_limit.span(),
            format!(
                "limit `{name}`: on_limit = \"delay\" needs max_delay, the longest a request is held, e.g. max_delay = \"500ms\""
            ),
        ));
    };
    let delay_ns = sluice_core::parse_duration(max_delay.get_ref()).map_err(|e| {
        at(
            max_delay.span(),
            format!("limit `{name}`: max_delay `{}`: {e}", max_delay.get_ref()),
        )
    })?;
    let rate = spec.rate;
    let extra = u128::from(rate.amount()) * u128::from(delay_ns) / u128::from(rate.period().max(1));
    let extra = u64::try_from(extra).unwrap_or(u64::MAX / 2);
    if extra == 0 {
        return Err(at(
            max_delay.span(),
            format!(
                "limit `{name}`: max_delay {} is shorter than one request's interval at {}: no request could ever be delayed",
                max_delay.get_ref(),
                rate
            ),
        ));
    }
    let max_queue = match max_queue {
        None => 100,
        Some(q) if *q.get_ref() >= 1 => usize::try_from(*q.get_ref()).unwrap_or(usize::MAX),
        Some(q) => {
            return Err(at(
                q.span(),
                format!("limit `{name}`: max_queue must be at least 1"),
            ));
        }
    };
    let extended = LimitSpec {
        burst: spec.burst.saturating_add(extra),
        ..*spec
    };
    extended
        .build()
        .map_err(|e| at(max_delay.span(), format!("limit `{name}`: max_delay: {e}")))?;
    Ok(Some(DelayDef {
        max_delay: delay_ns,
        max_queue,
        extra,
        spec: extended,
    }))
}

/// A `bucket = "shared"` plan rule.
fn compile_cost_rule(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: String,
) -> Result<CostRule, ConfigError> {
    let c = l.get_ref();
    let at = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    let own_counter = c
        .rate
        .as_ref()
        .map(|r| (r.span(), "rate"))
        .or(c.burst.as_ref().map(|b| (b.span(), "burst")))
        .or(c.on_limit.as_ref().map(|o| (o.span(), "on_limit")))
        .or(c.max_delay.as_ref().map(|o| (o.span(), "max_delay")));
    if let Some((span, field)) = own_counter {
        return Err(at(
            span,
            format!(
                "limit `{name}`: a bucket = \"shared\" rule has no counter of its own, so no `{field}`: it costs `cost` on the plan's main limits"
            ),
        ));
    }
    if c.key.is_some() || c.shadow || c.enforce_percent.is_some() {
        return Err(at(
            l.span(),
            format!(
                "limit `{name}`: a bucket = \"shared\" rule takes only `name`, `match`, `cost` and `bucket`"
            ),
        ));
    }
    let matcher = Matcher::compile(c.matches.get_ref())
        .map_err(|m| at(c.matches.span(), format!("limit `{name}`: {m}")))?;
    if matcher.is_any() {
        return Err(at(
            l.span(),
            format!(
                "limit `{name}`: a bucket = \"shared\" rule needs a `match` (it prices some requests on the plan's bucket)"
            ),
        ));
    }
    Ok(CostRule {
        name,
        matcher,
        cost: c.cost.as_ref().map_or(1, |c| *c.get_ref()),
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
