//! The decision engine: a policy and a store, answering "may this request
//! pass?" over every limit that applies to it, all-or-nothing.

use std::collections::HashMap;
use std::sync::Arc;

use sluice_core::{Clock, Decision, LimitSpec, Nanos, SystemClock};
use sluice_store::{Check, KeyHasher, KeyId, Limit, MemoryStore, MemoryStoreConfig};
use smallvec::SmallVec;

use arc_swap::ArcSwap;

use crate::config::HeadersConfig;
use crate::policy::{Access, MissingKey, Policy, RequestInfo};

/// One applied limit's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResult {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its algorithm, rate and burst.
    pub spec: LimitSpec,
    /// The decision under it.
    pub decision: Decision,
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
/// assert!(engine.decide(&req)?.allowed);
/// assert!(!engine.decide(&req)?.allowed);
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
            max_keys: policy.max_keys,
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
        }
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

    /// Decides a request over every limit that applies to it.
    pub fn decide<'r>(&self, req: &RequestInfo<'r>) -> Result<Verdict, DecideError> {
        let current = self.current.load();
        let access = current.policy.access(req);
        if access == Access::Denied {
            return Err(DecideError::Denied);
        }
        let runtime = self.runtime_plans.load();
        let applied = if runtime.is_empty() {
            current.policy.resolve(req)?
        } else {
            current
                .policy
                .resolve_with(req, |key| runtime.get(key).map(String::as_str))?
        };
        // Hash each distinct client key once.
        let mut ids: SmallVec<[(&str, KeyId); 4]> = SmallVec::new();
        let mut enforced: SmallVec<[(usize, Check<'_>); 4]> = SmallVec::new();
        let mut shadowed: SmallVec<[(usize, Check<'_>); 4]> = SmallVec::new();
        for (i, a) in applied.iter().enumerate() {
            let key = match ids.iter().find(|(k, _)| *k == a.key) {
                Some((_, id)) => *id,
                None => {
                    let id = self.hasher.key_id(&a.key);
                    ids.push((&a.key, id));
                    id
                }
            };
            let check = Check {
                limit: &current.limits[a.index],
                key,
                cost: a.cost,
            };
            let allowed_client = access == Access::Allowed;
            if !allowed_client && is_enforced(a.limit.shadow, a.limit.enforce_percent, key) {
                if a.cost > a.limit.spec.burst {
                    return Err(DecideError::Impossible {
                        limit: a.limit.name.to_string(),
                        cost: a.cost,
                        capacity: a.limit.spec.burst,
                    });
                }
                enforced.push((i, check));
            } else {
                shadowed.push((i, check));
            }
        }
        let checks: SmallVec<[Check<'_>; 4]> = enforced.iter().map(|(_, c)| *c).collect();
        let checked = self.store.check(&checks).map_err(|e| match e {
            sluice_core::CheckError::CostExceedsCapacity { cost, capacity } => {
                DecideError::Impossible {
                    limit: String::new(),
                    cost,
                    capacity,
                }
            }
        })?;
        let result = |i: usize, decision| {
            let limit = applied[i].limit;
            LimitResult {
                name: limit.name.clone(),
                spec: limit.spec,
                decision,
            }
        };
        let results = enforced
            .iter()
            .zip(checked.decisions)
            .map(|((i, _), decision)| result(*i, decision))
            .collect();
        // Shadowed limits count only requests that pass, and never refuse.
        let mut shadow = Vec::new();
        if checked.allowed {
            for (i, check) in &shadowed {
                let limit = applied[*i].limit;
                let decision = self.store.check_one(check).unwrap_or(Decision {
                    allowed: false,
                    ..Decision::full(limit.spec.burst)
                });
                if !decision.allowed {
                    tracing::info!(limit = %limit.name, "shadow: would have been limited");
                }
                shadow.push(result(*i, decision));
            }
        }
        Ok(Verdict {
            allowed: checked.allowed,
            results,
            shadow,
            style: current.policy.headers,
        })
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
