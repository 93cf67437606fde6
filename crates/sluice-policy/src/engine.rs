//! The decision engine: a policy and a store, answering "may this request
//! pass?" over every limit that applies to it, all-or-nothing.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::{Clock, Decision, LimitSpec, Nanos, SystemClock};
use sluice_redis::{DecidedBy, Fallback, SharedCheck, SharedStore};
use sluice_store::{Check, Checked, KeyHasher, KeyId, Limit, MemoryStore, MemoryStoreConfig};
use smallvec::SmallVec;

use arc_swap::ArcSwap;

use crate::config::HeadersConfig;
use crate::policy::{Access, LimitDef, LimitLabels, MissingKey, Policy, RequestInfo};

/// One applied limit's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResult {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its algorithm, rate and burst.
    pub spec: LimitSpec,
    /// The decision under it.
    pub decision: Decision,
    /// How metrics name the limit.
    pub labels: Arc<LimitLabels>,
    /// The client key's keyed hash (never the key itself).
    pub key: KeyId,
}

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether every applied limit allowed the request.
    pub allowed: bool,
    /// One result per applied, enforced limit, in policy order. Only these
    /// are shown to the client.
    pub results: Vec<LimitResult>,
    /// The limits that applied in shadow (shadow mode, or a key outside a
    /// limit's `enforce_percent`): decided and recorded, never refusing, and
    /// never shown to the client. Empty when the request was refused.
    pub shadow: Vec<LimitResult>,
    /// The header style of the config that decided it, so that a response
    /// never mixes two configs across a reload.
    pub style: HeadersConfig,
    /// Set when the shared store could not decide and its fallback did.
    pub fallback: Option<Fallback>,
}

impl Verdict {
    /// The limits that refused the request.
    pub fn violated(&self) -> impl Iterator<Item = &LimitResult> {
        self.results.iter().filter(|r| !r.decision.allowed)
    }

    /// How long until the request could pass: the longest retry-after of the
    /// violated limits. `None` when allowed.
    pub fn retry_after(&self) -> Option<Nanos> {
        self.violated().filter_map(|r| r.decision.retry_after).max()
    }

    /// How long an admitted request should be held (leaky bucket queueing).
    pub fn delay(&self) -> Nanos {
        self.results
            .iter()
            .map(|r| r.decision.delay)
            .max()
            .unwrap_or(0)
    }
}

/// A plan the policy does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no plan named `{0}`")]
pub struct UnknownPlan(pub String);

/// Where a key's plan comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanSource {
    /// Assigned at run time.
    Runtime,
    /// Assigned in the config's `[keys]`.
    Config,
    /// The config's `default_plan`.
    Default,
}

/// Why a request could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// A limit needs a key the request lacks.
    #[error(transparent)]
    MissingKey(#[from] MissingKey),
    /// The client is on the deny list.
    #[error("this client is denied")]
    Denied,
    /// The request costs more than a limit can ever admit.
    #[error(
        "limit `{limit}`: cost {cost} exceeds its capacity of {capacity}; this request can never pass"
    )]
    Impossible {
        /// The limit.
        limit: String,
        /// The request's cost.
        cost: u64,
        /// The limit's burst.
        capacity: u64,
    },
}

/// A policy over a store.
///
/// ```
/// use std::path::Path;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let dir = std::env::temp_dir().join(format!("sluice-doc-{}", std::process::id()));
/// # std::fs::create_dir_all(&dir)?;
/// # let path = dir.join("engine.toml");
/// std::fs::write(&path, r#"
///     [[limits]]
///     name = "per-ip"
///     key = "ip"
///     rate = "1/s"
///     burst = 1
/// "#)?;
/// let engine = sluice_policy::Engine::new(sluice_policy::Policy::load(&path)?);
/// let (method, headers) = (http::Method::GET, http::HeaderMap::new());
/// let req = sluice_policy::RequestInfo {
///     method: &method, path: "/", headers: &headers,
///     peer: Some("192.0.2.1".parse()?), cost: None,
/// };
/// assert!(engine.decide_local(&req)?.allowed);
/// assert!(!engine.decide_local(&req)?.allowed);
/// # Ok(()) }
/// ```
///
/// The policy can be replaced while requests are decided
/// ([`Engine::replace_policy`]): each decision reads one policy from start to
/// end, and limits whose definition did not change keep their counters.
#[derive(Debug)]
pub struct Engine<C: Clock = SystemClock> {
    current: ArcSwap<Compiled>,
    /// Plans assigned at run time, by client key; they beat the config's.
    runtime_plans: ArcSwap<HashMap<String, String>>,
    store: Arc<MemoryStore<C>>,
    hasher: KeyHasher,
    /// The shared store, when the limits live in Redis.
    shared: Option<Arc<SharedStore>>,
}

/// A policy and its limits' state in the store, swapped as one.
#[derive(Debug)]
struct Compiled {
    policy: Arc<Policy>,
    /// The store's state of each of the policy's limits, by index.
    limits: Vec<Arc<Limit>>,
}

impl Engine<SystemClock> {
    /// An engine with a fresh in-memory store sized by the policy.
    pub fn new(policy: Policy) -> Self {
        let store = MemoryStore::new(MemoryStoreConfig {
            max_keys: policy.store.max_keys,
            shards: 0,
        });
        Self::with_store(policy, Arc::new(store), KeyHasher::random())
    }
}

impl<C: Clock> Engine<C> {
    /// An engine over an existing store (shared with other engines, or on a
    /// manual clock).
    pub fn with_store(policy: Policy, store: Arc<MemoryStore<C>>, hasher: KeyHasher) -> Self {
        let compiled = Compiled::new(policy, &store);
        Self {
            current: ArcSwap::from_pointee(compiled),
            runtime_plans: ArcSwap::from_pointee(HashMap::new()),
            store,
            hasher,
            shared: None,
        }
    }

    /// Decides on a shared store (Redis) instead of the memory store. The
    /// hasher must be keyed by the secret every instance shares, so that
    /// they name a client's keys alike.
    pub fn with_shared(mut self, shared: Arc<SharedStore>, hasher: KeyHasher) -> Self {
        self.shared = Some(shared);
        self.hasher = hasher;
        self
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.current.load().policy.clone()
    }

    /// Puts a client key on a plan at run time, over the config's
    /// assignment. Fails when the current policy has no such plan.
    pub fn assign_plan(&self, key: &str, plan: &str) -> Result<(), UnknownPlan> {
        if !self.current.load().policy.has_plan(plan) {
            return Err(UnknownPlan(plan.to_owned()));
        }
        self.runtime_plans.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(key.to_owned(), plan.to_owned());
            m
        });
        Ok(())
    }

    /// Removes a key's runtime assignment; returns whether it had one.
    pub fn unassign_plan(&self, key: &str) -> bool {
        let mut had = false;
        self.runtime_plans.rcu(|m| {
            let mut m = HashMap::clone(m);
            had = m.remove(key).is_some();
            m
        });
        had
    }

    /// A key's plan now, and where it comes from.
    pub fn plan_of(&self, key: &str) -> Option<(String, PlanSource)> {
        let current = self.current.load();
        let policy = &current.policy;
        if let Some(p) = self
            .runtime_plans
            .load()
            .get(key)
            .filter(|p| policy.has_plan(p))
        {
            return Some((p.clone(), PlanSource::Runtime));
        }
        let p = policy.plan_of(key)?;
        let source = if policy.assigned_in_config(key) {
            PlanSource::Config
        } else {
            PlanSource::Default
        };
        Some((p.to_owned(), source))
    }

    /// Replaces the policy. Requests being decided finish on the old one;
    /// the next ones see the new one. A limit whose identity (scope, name
    /// and definition) is unchanged keeps its counters; a new or changed one
    /// starts fresh.
    pub fn replace_policy(&self, policy: Policy) {
        let compiled = Compiled::new(policy, &self.store);
        self.current.store(Arc::new(compiled));
    }

    /// The store.
    pub fn store(&self) -> &Arc<MemoryStore<C>> {
        &self.store
    }

    /// The shared store, when one is configured.
    pub fn shared(&self) -> Option<&Arc<SharedStore>> {
        self.shared.as_ref()
    }

    /// Decides a request over every limit that applies to it: on the shared
    /// store when one is configured (with its fallback when it cannot), else
    /// on the memory store without waiting.
    pub async fn decide(&self, req: &RequestInfo<'_>) -> Result<Verdict, DecideError> {
        match &self.shared {
            None => self.decide_local(req),
            Some(shared) => self.decide_shared(shared, req).await,
        }
    }

    /// Decides a request on the engine's in-memory store, without waiting,
    /// even when a shared store is configured: for the simulator and for
    /// engines without a shared store.
    pub fn decide_local(&self, req: &RequestInfo<'_>) -> Result<Verdict, DecideError> {
        let current = self.current.load();
        let runtime = self.runtime_plans.load();
        let plan = self.plan(&current, &runtime, req)?;
        let checks: SmallVec<[Check<'_>; 4]> = plan
            .enforced
            .iter()
            .map(|p| p.memory_check(&current))
            .collect();
        let checked = self.store.check(&checks).map_err(|e| match e {
            sluice_core::CheckError::CostExceedsCapacity { cost, capacity } => {
                DecideError::Impossible {
                    limit: String::new(),
                    cost,
                    capacity,
                }
            }
        })?;
        // Shadowed limits count only requests that pass, and never refuse.
        let mut shadow = Vec::new();
        if checked.allowed {
            for p in &plan.shadowed {
                let decision = self
                    .store
                    .check_one(&p.memory_check(&current))
                    .unwrap_or_else(|_| p.impossible());
                shadow.push(p.result(decision));
            }
        }
        Ok(plan.verdict(checked, shadow, None))
    }

    /// Which limits apply to a request, under which keys, enforced or in
    /// shadow.
    fn plan<'p>(
        &self,
        current: &'p Compiled,
        runtime: &'p HashMap<String, String>,
        req: &RequestInfo<'p>,
    ) -> Result<Plan<'p>, DecideError> {
        let access = current.policy.access(req);
        if access == Access::Denied {
            return Err(DecideError::Denied);
        }
        let applied = if runtime.is_empty() {
            current.policy.resolve(req)?
        } else {
            current
                .policy
                .resolve_with(req, |key| runtime.get(key).map(String::as_str))?
        };
        // Hash each distinct client key once.
        let mut ids: SmallVec<[(std::borrow::Cow<'p, str>, KeyId); 4]> = SmallVec::new();
        let mut enforced = SmallVec::new();
        let mut shadowed = SmallVec::new();
        for a in applied {
            let key = match ids.iter().find(|(k, _)| *k == a.key) {
                Some((_, id)) => *id,
                None => {
                    let id = self.hasher.key_id(&a.key);
                    ids.push((a.key, id));
                    id
                }
            };
            let allowed_client = access == Access::Allowed;
            let planned = Planned {
                limit: a.limit,
                index: a.index,
                key,
                cost: a.cost,
            };
            if !allowed_client && is_enforced(a.limit.shadow, a.limit.enforce_percent, key) {
                if a.cost > a.limit.spec.burst {
                    return Err(DecideError::Impossible {
                        limit: a.limit.name.to_string(),
                        cost: a.cost,
                        capacity: a.limit.spec.burst,
                    });
                }
                enforced.push(planned);
            } else {
                shadowed.push(planned);
            }
        }
        Ok(Plan {
            enforced,
            shadowed,
            style: current.policy.headers,
        })
    }

    async fn decide_shared(
        &self,
        shared: &SharedStore,
        req: &RequestInfo<'_>,
    ) -> Result<Verdict, DecideError> {
        let current = self.current.load_full();
        let runtime = self.runtime_plans.load_full();
        let plan = self.plan(&current, &runtime, req)?;
        let checks: SmallVec<[SharedCheck<'_>; 4]> =
            plan.enforced.iter().map(Planned::shared_check).collect();
        let decided = shared.check(&checks).await;
        let fallback = match decided.by {
            DecidedBy::Fallback(f) => Some(f),
            DecidedBy::Store | DecidedBy::Cache => None,
        };
        let mut shadow = Vec::new();
        if decided.checked.allowed {
            for p in &plan.shadowed {
                let one = shared.check(&[p.shared_check()]).await;
                let decision = one
                    .checked
                    .decisions
                    .first()
                    .copied()
                    .unwrap_or_else(|| p.impossible());
                shadow.push(p.result(decision));
            }
        }
        Ok(plan.verdict(decided.checked, shadow, fallback))
    }
}

/// One applied limit, planned.
struct Planned<'p> {
    limit: &'p LimitDef,
    index: usize,
    key: KeyId,
    cost: u64,
}

impl<'p> Planned<'p> {
    fn memory_check<'c>(&self, current: &'c Compiled) -> Check<'c> {
        Check {
            limit: &current.limits[self.index],
            key: self.key,
            cost: self.cost,
        }
    }

    fn shared_check(&self) -> SharedCheck<'p> {
        SharedCheck {
            limit_id: &self.limit.id,
            spec: &self.limit.spec,
            limiter: &self.limit.limiter,
            key: self.key,
            cost: self.cost,
        }
    }

    fn result(&self, decision: Decision) -> LimitResult {
        LimitResult {
            name: self.limit.name.clone(),
            spec: self.limit.spec,
            decision,
            labels: self.limit.labels.clone(),
            key: self.key,
        }
    }

    fn impossible(&self) -> Decision {
        Decision {
            allowed: false,
            ..Decision::full(self.limit.spec.burst)
        }
    }
}

/// The limits of one request, split into enforced and shadowed.
struct Plan<'p> {
    enforced: SmallVec<[Planned<'p>; 4]>,
    shadowed: SmallVec<[Planned<'p>; 4]>,
    style: HeadersConfig,
}

impl Plan<'_> {
    fn verdict(
        &self,
        checked: Checked,
        shadow: Vec<LimitResult>,
        fallback: Option<Fallback>,
    ) -> Verdict {
        for r in &shadow {
            if !r.decision.allowed {
                tracing::info!(limit = %r.name, "shadow: would have been limited");
            }
        }
        Verdict {
            allowed: checked.allowed,
            results: self
                .enforced
                .iter()
                .zip(checked.decisions)
                .map(|(p, d)| p.result(d))
                .collect(),
            shadow,
            style: self.style,
            fallback,
        }
    }
}

/// Whether a limit is enforced for a key: not in shadow, and the key falls
/// in its `enforce_percent` (sticky: by the key's keyed hash).
fn is_enforced(shadow: bool, percent: u8, key: KeyId) -> bool {
    !shadow && (percent >= 100 || key.low() % 100 < u64::from(percent))
}

impl Compiled {
    fn new<C: Clock>(policy: Policy, store: &MemoryStore<C>) -> Self {
        let limits = policy
            .limits()
            .iter()
            .map(|def| store.limit(&def.id, def.limiter))
            .collect();
        Self {
            policy: Arc::new(policy),
            limits,
        }
    }
}
