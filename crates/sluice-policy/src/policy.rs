//! The policy: a compiled config that turns a request into the limits that
//! apply to it, each with its key and cost.

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, Method};

use crate::client_ip::TrustedProxies;
use crate::config::{CarryOver, HeadersConfig};
use crate::key_source::KeySource;
use crate::key_text::KeyText;
pub use crate::labels::LimitLabels;
pub use crate::limit::{DelayDef, Limit};
pub use crate::matcher::Matcher;
use crate::request_key::key_of;

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
    /// The whole-number and boolean fields of its JSON body, where the
    /// adapter read them because a rule reads them there
    /// ([`Policy::reads_request_body`]); `None` otherwise.
    pub body: Option<&'a crate::request_body::BodyFields>,
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

/// A request names its client ambiguously: a key header with more than one
/// value (on several lines, or comma-separated on one), or forwarding
/// headers from a trusted proxy that name different clients. Which client
/// it is depends on which one is read (an upstream reading the last would
/// see another identity than the limit counted), so it is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", ambiguity(from))]
pub struct AmbiguousKey {
    /// Where the key comes from.
    pub from: KeySource,
}

/// What is ambiguous about a request's key from `from`.
fn ambiguity(from: &KeySource) -> String {
    match from {
        KeySource::Ip => crate::client_ip::AmbiguousClient.to_string(),
        _ => format!(
            "the request has more than one `{from}` value, so which client it is is ambiguous"
        ),
    }
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
    /// Whether every request meets the same limits (the global ones, none
    /// with a `match`), with no client key, plans or access lists: a
    /// request is resolved by its keys alone.
    pub(crate) alike: bool,
    /// Whether a limit or a cost rule matches on the request's host.
    pub(crate) reads_host: bool,
    pub(crate) limits: Vec<LimitDef>,
    pub(crate) global: Vec<usize>,
    pub(crate) plans: BTreeMap<String, Vec<usize>>,
    pub(crate) cost_rules: BTreeMap<String, Vec<CostRule>>,
    pub(crate) assignments: HashMap<String, String>,
    /// `[client] keys_file`, resolved against the config's folder.
    pub keys_file: Option<std::path::PathBuf>,
    /// `[client] runtime_keys_file`, resolved and read.
    pub runtime_keys: Option<RuntimeKeysFile>,
    /// What a key that changes plan keeps of its used quota.
    pub carry_over: CarryOver,
    pub(crate) default_plan: Option<String>,
    pub(crate) client_key: Option<KeySource>,
    pub(crate) trusted: TrustedProxies,
    /// Header style.
    pub headers: HeadersConfig,
    /// Account-manager events.
    pub events: crate::events::EventSettings,
    pub(crate) access: crate::config::AccessConfig,
    /// `[overload]`, resolved.
    pub(crate) overload: Arc<crate::OverloadSettings>,
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
    /// Every limit of the policy.
    pub fn limits(&self) -> &[LimitDef] {
        &self.limits
    }

    /// The client address of a request from `peer`, per the trusted proxies.
    pub fn client_ip(
        &self,
        peer: IpAddr,
        headers: &HeaderMap,
    ) -> Result<IpAddr, crate::client_ip::AmbiguousClient> {
        self.trusted.client_ip(peer, headers)
    }

    /// The network that identifies the client of a request from `peer`:
    /// its IPv4 address, or its IPv6 address's `client.ipv6_prefix`.
    pub fn client_net(
        &self,
        peer: IpAddr,
        headers: &HeaderMap,
    ) -> Result<ipnet::IpNet, crate::client_ip::AmbiguousClient> {
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
        // allow entry covers all of it. A client whose forwarding headers
        // disagree may be any of the clients they name: denied, so that
        // it cannot slip past a deny list.
        let net = match req
            .peer
            .map(|peer| self.trusted.client_net(peer, req.headers))
        {
            Some(Err(_)) if !a.deny_cidrs.is_empty() => return Access::Denied,
            Some(Ok(net)) => Some(net),
            _ => None,
        };
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

    /// Whether a limit or a cost rule matches on the request's host, so
    /// that a request naming none would slip past it.
    pub fn reads_host(&self) -> bool {
        self.reads_host
    }

    /// Whether a limit settles its cost after the response (a `settle`
    /// rule): adapters then decide with
    /// [`Engine::decide_reserving`](crate::Engine::decide_reserving).
    pub fn settles(&self) -> bool {
        self.limits.iter().any(|l| l.limit.settle.is_some())
    }

    /// Whether a rule reads the request's JSON body: a settle rule's
    /// `estimate = "json:<field>"`, or a `match.json` condition of a limit
    /// or a plan's cost rule. Adapters then read the body's top-level
    /// fields first, as far as their bound allows.
    pub fn reads_request_body(&self) -> bool {
        self.limits.iter().any(|l| {
            l.matcher.reads_body()
                || l.limit
                    .settle
                    .as_ref()
                    .is_some_and(|s| s.reads_request_body())
        }) || self
            .cost_rules
            .values()
            .flatten()
            .any(|r| r.matcher.reads_body())
    }

    /// A plan's `bucket = "shared"` rules.
    pub fn cost_rules(&self, plan: &str) -> &[CostRule] {
        self.cost_rules.get(plan).map_or(&[], Vec::as_slice)
    }

    /// `[overload]`, resolved (off when the config has none). Shared: an
    /// adapter tells a reload's change by the pointer.
    pub fn overload(&self) -> &Arc<crate::OverloadSettings> {
        &self.overload
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
                rules.iter().find(|r| {
                    r.matcher
                        .matches_request(req.method, req.path, req.headers, req.body)
                })
            })
            .map(|r| r.cost);

        let candidates = self.global.iter().chain(plan.into_iter().flatten());
        for &i in candidates {
            let limit = &self.limits[i];
            if !limit
                .matcher
                .matches_request(req.method, req.path, req.headers, req.body)
            {
                continue;
            }
            let configured = match shared_cost {
                Some(cost) if limit.limit.plan.is_some() && limit.matcher.is_any() => cost,
                _ => limit.cost,
            };
            visit(&Applied {
                limit,
                index: i,
                key: self.key_for::<E>(limit, req)?,
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

impl Policy {
    /// The keyed hash of the key a limit counts a request by (see
    /// [`key_for`](Self::key_for)). The usual client, an IPv4 peer with no
    /// proxy trusted, has its address as its network and key (as `key_of`
    /// says): under a random hasher it is hashed from its bytes, without
    /// its text.
    #[inline(always)]
    pub(crate) fn key_id_for<E: From<MissingKey> + From<AmbiguousKey>>(
        &self,
        limit: &LimitDef,
        req: &RequestInfo<'_>,
        hasher: &sluice_store::KeyHasher,
    ) -> Result<sluice_store::KeyId, E> {
        if let (KeySource::Ip, Some(IpAddr::V4(v4))) = (&limit.key, req.peer)
            && self.trusted.is_empty()
        {
            return Ok(hasher.key_id_v4(v4, || crate::key_text::IpText::new(IpAddr::V4(v4))));
        }
        Ok(self.key_for::<E>(limit, req)?.id(hasher))
    }

    /// The key a limit counts a request by: an error when the request
    /// lacks it or gives it ambiguously.
    #[inline]
    pub(crate) fn key_for<'a, E: From<MissingKey> + From<AmbiguousKey>>(
        &self,
        limit: &LimitDef,
        req: &RequestInfo<'a>,
    ) -> Result<KeyText<'a>, E> {
        Ok(
            key_of(&limit.key, req, &self.trusted)?.ok_or_else(|| MissingKey {
                limit: limit.limit.name.to_string(),
                from: limit.key.clone(),
            })?,
        )
    }
}
