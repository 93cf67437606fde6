//! The decision engine: a policy and a store, answering "may this request
//! pass?" over every limit that applies to it, all-or-nothing.

mod on_shared;

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use sluice_core::{Clock, Decision, LimitSpec, Nanos, SystemClock};
use sluice_redis::runtime_state::spawn_watch;
use sluice_redis::{
    DecidedBy, Fallback, RedisStoreError, RuntimeSink, RuntimeState, SharedCheck, SharedStore,
};
use sluice_store::{Check, Checked, KeyHasher, KeyId, Limit, MemoryStore, MemoryStoreConfig};
use smallvec::SmallVec;

use arc_swap::ArcSwap;

use crate::config::{CarryOver, HeadersConfig};
use crate::delay_queue::{DelayQueue, Releases};
use crate::policy::{Access, LimitDef, LimitLabels, MissingKey, Policy, RequestInfo};
use crate::runtime::{RuntimePlans, RuntimePlansCell};

/// One applied limit's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResult {
    /// Its algorithm, rate and burst.
    pub spec: LimitSpec,
    /// The decision under it.
    pub decision: Decision,
    /// How metrics name the limit; its name is [`name`](Self::name).
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

impl LimitResult {
    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.labels.limit
    }
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

    /// How long an admitted request should be held: leaky bucket queueing,
    /// or an `on_limit = "delay"` limit's wait for its reserved slot.
    pub fn delay(&self) -> Nanos {
        self.results
            .iter()
            .map(|r| r.decision.delay)
            .max()
            .unwrap_or(0)
    }
}

/// Why the runtime assignments could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The config has no `[client] runtime_keys_file`.
    #[error("the config has no `[client] runtime_keys_file` to save to")]
    NotConfigured,
    /// Writing the file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// A plan the policy does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no plan named `{0}`")]
pub struct UnknownPlan(pub String);

/// Why a runtime change (a plan assignment, a credit balance) was not made.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The policy has no such plan.
    #[error(transparent)]
    UnknownPlan(#[from] UnknownPlan),
    /// The shared store did not take the change; nothing changed here.
    #[error("the shared store did not take the change: {0}")]
    Store(#[from] RedisStoreError),
}

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
    /// A key header is given twice with different values.
    #[error(transparent)]
    AmbiguousKey(#[from] crate::policy::AmbiguousKey),
    /// The client is on the deny list.
    #[error("this client is denied")]
    Denied,
    /// The path has no canonical form (see [`path`](crate::path)).
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
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
    /// Plans assigned at run time, by client key id; they beat the
    /// config's. With a shared store, a mirror of its assignments.
    runtime_plans: RuntimePlansCell,
    store: Arc<MemoryStore<C>>,
    hasher: KeyHasher,
    /// The shared store, when the limits live in Redis.
    shared: Option<Arc<SharedStore>>,
    /// Runtime plans and credits in the shared store, when there is one.
    runtime_state: Option<RuntimeState>,
    /// Burst credits by client key id. With a shared store, a mirror of
    /// its balances (it spares a round trip to keys without credits).
    credits: Mutex<HashMap<KeyId, u64>>,
}

/// A policy and its limits' state in the store, swapped as one.
#[derive(Debug)]
struct Compiled {
    policy: Arc<Policy>,
    /// The store's state of each of the policy's limits, by index.
    limits: Vec<Arc<Limit>>,
    /// The gate of each gated limit (`on_limit = "delay"` or `max_share`),
    /// by index: its delay queue, locked by every decision on the limit on
    /// the memory store (on a shared store, only the queue bound is kept
    /// here; Redis applies the rest).
    gates: Vec<Option<Arc<DelayQueue>>>,
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
        let runtime = policy
            .runtime_keys
            .as_ref()
            .map(|r| RuntimePlans::from_keys(&r.loaded, &hasher))
            .unwrap_or_default();
        let compiled = Compiled::new(policy, &store, None);
        Self {
            current: ArcSwap::from_pointee(compiled),
            runtime_plans: RuntimePlansCell::new(runtime),
            store,
            hasher,
            shared: None,
            runtime_state: None,
            credits: Mutex::new(HashMap::new()),
        }
    }

    /// Decides on a shared store (Redis) instead of the memory store. The
    /// hasher must be keyed by the secret every instance shares, so that
    /// they name a client's keys alike.
    ///
    /// Runtime plan assignments and burst credits then live in the shared
    /// store too; [`watch_runtime_state`](Self::watch_runtime_state) keeps
    /// this engine's copy current.
    pub fn with_shared(mut self, shared: Arc<SharedStore>, hasher: KeyHasher) -> Self {
        let plans = self.runtime_plans.load().rehashed(&hasher);
        self.runtime_plans = RuntimePlansCell::new(plans);
        self.credits
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.runtime_state = Some(RuntimeState::new(shared.clone()));
        self.shared = Some(shared);
        self.hasher = hasher;
        self
    }

    /// With a shared store, polls its runtime plans and credits every
    /// `every` in the background, so that changes made through any
    /// instance apply here (see [`sluice_redis::runtime_state`]); the task
    /// ends when the engine is dropped. Returns whether it was started (not
    /// without a shared store). Must be called within a tokio runtime.
    pub fn watch_runtime_state(self: &Arc<Self>, every: Duration) -> bool
    where
        C: 'static,
    {
        let Some(state) = &self.runtime_state else {
            return false;
        };
        let sink: std::sync::Weak<dyn RuntimeSink> = Arc::downgrade(self) as _;
        spawn_watch(state.clone(), sink, every);
        true
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.current.load().policy.clone()
    }

    /// Puts a client key on a plan at run time, over the config's
    /// assignment, in this engine only. Fails when the current policy has no
    /// such plan. (With a shared store, [`Engine::set_plan`] writes it there
    /// too; an assignment made only here is replaced at the next sync.)
    ///
    /// On the memory store, with `[client] carry_over = "proportional"`
    /// (the default), the key keeps the share of quota it has used: see
    /// [`Engine::carry_over`].
    pub fn assign_plan(&self, key: &str, plan: &str) -> Result<(), UnknownPlan> {
        if !self.current.load().policy.has_plan(plan) {
            return Err(UnknownPlan(plan.to_owned()));
        }
        let before = self.plan_of(key).map(|(p, _)| p);
        let id = self.hasher.key_id(key);
        self.runtime_plans.update(|m| m.with(id, key, plan));
        if let Some(before) = before {
            self.carry_over(key, &before, plan);
        }
        Ok(())
    }

    /// Removes a key's runtime assignment; returns whether it had one. The
    /// key goes back to its config plan, with the same carry-over as
    /// [`Engine::assign_plan`].
    pub fn unassign_plan(&self, key: &str) -> bool {
        let before = self.plan_of(key).map(|(p, _)| p);
        let id = self.hasher.key_id(key);
        let mut had = false;
        self.runtime_plans.update(|m| {
            let (next, removed) = m.without(id);
            had = removed;
            next
        });
        if let (Some(before), Some((after, _))) = (before, self.plan_of(key)) {
            self.carry_over(key, &before, &after);
        }
        had
    }

    /// The runtime assignments now whose raw key this process knows (made
    /// through it, or loaded from `runtime_keys_file`), sorted by key. With
    /// a shared store, assignments made through other instances are known
    /// here only by key id, and are not listed.
    pub fn runtime_assignments(&self) -> BTreeMap<String, String> {
        self.runtime_plans.load().named()
    }

    /// Puts a client key on a plan at run time (the admin API's `PUT`):
    /// with a shared store, there first (every instance applies it within
    /// a poll), then here, as [`Engine::assign_plan`] does. If the store
    /// fails, nothing changes.
    pub async fn set_plan(&self, key: &str, plan: &str) -> Result<(), RuntimeError> {
        if !self.current.load().policy.has_plan(plan) {
            return Err(UnknownPlan(plan.to_owned()).into());
        }
        let before = self.plan_of(key).map(|(p, _)| p);
        if let Some(state) = &self.runtime_state {
            state.set_plan(self.hasher.key_id(key), plan).await?;
        }
        self.assign_plan(key, plan)?;
        if let Some(before) = before {
            self.carry_over_shared(key, &before, plan).await;
        }
        Ok(())
    }

    /// Removes a key's runtime assignment (the admin API's `DELETE`): from
    /// the shared store first, when there is one, then here. Returns
    /// whether it had one.
    pub async fn clear_plan(&self, key: &str) -> Result<bool, RuntimeError> {
        let before = self.plan_of(key).map(|(p, _)| p);
        let remote = match &self.runtime_state {
            Some(state) => state.remove_plan(self.hasher.key_id(key)).await?,
            None => false,
        };
        let had = self.unassign_plan(key) || remote;
        let after = self.plan_of(key).map(|(p, _)| p);
        if let (Some(before), Some(after)) = (before, after) {
            self.carry_over_shared(key, &before, &after).await;
        }
        Ok(had)
    }

    /// Writes the runtime assignments to `[client] runtime_keys_file`,
    /// atomically (a temporary file renamed over it). Returns the file and
    /// how many assignments it holds.
    pub fn save_runtime_assignments(&self) -> Result<(PathBuf, usize), SaveError> {
        let policy = self.policy();
        let Some(file) = &policy.runtime_keys else {
            return Err(SaveError::NotConfigured);
        };
        let all = self.runtime_assignments();
        crate::keys_file::write_atomically(&file.path, &all).map_err(|source| SaveError::Io {
            path: file.path.clone(),
            source,
        })?;
        Ok((file.path.clone(), all.len()))
    }

    /// Carries a key's used quota from plan `from` to plan `to` on the
    /// memory store (a no-op with a shared store, where
    /// [`Engine::set_plan`] carries it in Redis; with `carry_over =
    /// "reset"`; or when the plans are the same).
    ///
    /// Limits are paired by name, else by position: the n-th limit of `to`
    /// takes the used fraction of the n-th limit of `from`. Only limits
    /// counted by the client key take part. If the old limit is 75 % used
    /// now, the new one is charged until it is 75 % used (it is never
    /// refunded: a key that already used more of the new plan keeps that).
    pub fn carry_over(&self, key: &str, from: &str, to: &str) {
        let current = self.current.load();
        if self.shared.is_some() {
            return;
        }
        let id = self.hasher.key_id(key);
        for (oi, ni) in carry_pairs(&current.policy, from, to) {
            let policy = &current.policy;
            let (old_def, new_def) = (&policy.limits()[oi], &policy.limits()[ni]);
            let used_old = self.used(&current, oi, old_def, id);
            let used_new = self.used(&current, ni, new_def, id);
            let charge = carry_charge(old_def, new_def, used_old, used_new);
            if charge > 0 {
                let _ = self.store.check_one(&Check {
                    limit: &current.limits[ni],
                    key: id,
                    cost: charge,
                });
            }
        }
    }

    /// [`Engine::carry_over`] on the shared store: the used shares are read
    /// from Redis and the new plan's limits charged there, once, by the
    /// instance that made the change. If Redis cannot answer, nothing is
    /// carried (the key starts the new plan fresh).
    async fn carry_over_shared(&self, key: &str, from: &str, to: &str) {
        let Some(shared) = &self.shared else { return };
        let current = self.current.load_full();
        let id = self.hasher.key_id(key);
        let used = |def: &'_ LimitDef, decided: sluice_redis::SharedChecked| -> Option<u64> {
            if decided.by != DecidedBy::Store {
                return None;
            }
            let d = decided.checked.decisions.first()?;
            let extra = def.delay.map_or(0, |d| d.extra);
            Some(
                def.spec
                    .burst
                    .saturating_sub(d.remaining.saturating_sub(extra)),
            )
        };
        for (oi, ni) in carry_pairs(&current.policy, from, to) {
            let policy = &current.policy;
            let (old_def, new_def) = (&policy.limits()[oi], &policy.limits()[ni]);
            fn peek(def: &LimitDef, key: KeyId) -> SharedCheck<'_> {
                let (spec, limiter) = def.counter();
                SharedCheck {
                    limit_id: &def.id,
                    spec,
                    limiter,
                    key,
                    cost: 0,
                    reserve: 0,
                }
            }
            let Some(used_old) = used(old_def, shared.check(&[peek(old_def, id)]).await) else {
                continue;
            };
            let Some(used_new) = used(new_def, shared.check(&[peek(new_def, id)]).await) else {
                continue;
            };
            let charge = carry_charge(old_def, new_def, used_old, used_new);
            if charge > 0 {
                let _ = shared
                    .check(&[SharedCheck {
                        cost: charge,
                        ..peek(new_def, id)
                    }])
                    .await;
            }
        }
    }

    /// How much of a limit's burst a key has used now (a peek).
    fn used(&self, current: &Compiled, index: usize, def: &LimitDef, key: KeyId) -> u64 {
        let peek = self.store.peek_one(&Check {
            limit: &current.limits[index],
            key,
            cost: 0,
        });
        let extra = def.delay.map_or(0, |d| d.extra);
        match peek {
            Ok(d) => def
                .spec
                .burst
                .saturating_sub(d.remaining.saturating_sub(extra)),
            Err(_) => 0,
        }
    }

    /// A key's plan now, and where it comes from.
    pub fn plan_of(&self, key: &str) -> Option<(String, PlanSource)> {
        let current = self.current.load();
        let policy = &current.policy;
        let runtime = self.runtime_plans.load();
        if !runtime.is_empty()
            && let Some(p) = runtime
                .plan(self.hasher.key_id(key))
                .filter(|p| policy.has_plan(p))
        {
            return Some((p.to_owned(), PlanSource::Runtime));
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
    ///
    /// The shared store's local fallback forgets its shares of the limits
    /// the old policy had and the new one lacks (limits of others sharing
    /// that store, such as the Envoy service, are kept).
    pub fn replace_policy(&self, policy: Policy) {
        let old = self.current.load_full();
        let compiled = Compiled::new(policy, &self.store, Some(&old));
        if let Some(shared) = &self.shared {
            let ids = |p: &Policy| {
                p.limits()
                    .iter()
                    .map(|l| l.id.clone())
                    .collect::<std::collections::HashSet<_>>()
            };
            let (before, after) = (ids(&old.policy), ids(&compiled.policy));
            shared.retain_local(|id| after.contains(id) || !before.contains(id));
        }
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
    ///
    /// Limits match on the request's [canonical path](crate::path): any
    /// spelling of `/export` is charged to `/export`'s limits, and a path
    /// with no canonical form is refused with [`DecideError::Path`].
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
        let path = crate::path::canonical(req.path)?;
        let req = &RequestInfo {
            path: &path,
            ..*req
        };
        let current = self.current.load();
        let runtime = self.runtime_plans.in_force();
        let mut plan = Plan::new(current.policy.headers);
        self.plan(
            &current,
            runtime.as_deref().map(Arc::as_ref),
            req,
            &mut plan,
        )?;
        if plan
            .enforced
            .iter()
            .any(|p| current.gates[p.index].is_some())
        {
            return self.decide_gated(&current, &plan);
        }
        let mut checked = match plan.enforced.as_slice() {
            // The usual case, one limit: its decision is the verdict's
            // only result, with no list of decisions in between.
            [only] => {
                let decision = self
                    .store
                    .check_one(&only.memory_check(&current))
                    .map_err(impossible)?;
                if decision.allowed && plan.shadowed.is_empty() {
                    return Ok(plan.verdict_of_one(only.result(decision)));
                }
                Checked {
                    allowed: decision.allowed,
                    decisions: vec![decision],
                }
            }
            _ => self.check_enforced(&current, &plan)?,
        };
        if !checked.allowed
            && let Some(paid) = self.spend_credits(&current, &plan, &checked)?
        {
            checked = paid;
        }
        Ok(self.finish(&current, &plan, checked))
    }

    /// Checks the enforced limits, all-or-nothing.
    fn check_enforced(&self, current: &Compiled, plan: &Plan<'_>) -> Result<Checked, DecideError> {
        let checks: SmallVec<[Check<'_>; 4]> = plan
            .enforced
            .iter()
            .map(|p| p.memory_check(current))
            .collect();
        self.store.check(&checks).map_err(impossible)
    }

    /// Decides the shadowed limits of an admitted request and makes the
    /// verdict.
    fn finish(&self, current: &Compiled, plan: &Plan<'_>, checked: Checked) -> Verdict {
        // Shadowed limits count only requests that pass, and never refuse.
        let mut shadow = Vec::new();
        if checked.allowed {
            for p in &plan.shadowed {
                let decision = self
                    .store
                    .check_one(&p.memory_check(current))
                    .map(|d| p.translate(d, false))
                    .unwrap_or_else(|_| p.impossible());
                shadow.push(p.result(decision));
            }
        }
        plan.verdict(checked, shadow, None)
    }

    /// [`decide_local`](Self::decide_local) for a request under at least one
    /// gated limit (`on_limit = "delay"`, or `max_share` priority classes).
    /// The gates of its gated limits are locked (in index order) for the
    /// whole decision, so that their bounds are exact:
    ///
    /// 1. a class may not take a limit below the share reserved for others;
    /// 2. a delay limit whose queue is full admits only what fits its burst
    ///    now;
    ///
    /// and a request refused by either is charged nothing.
    fn decide_gated(&self, current: &Compiled, plan: &Plan<'_>) -> Result<Verdict, DecideError> {
        let now = self.store.clock().now();
        let mut order: SmallVec<[usize; 4]> = (0..plan.enforced.len())
            .filter(|&i| current.gates[plan.enforced[i].index].is_some())
            .collect();
        order.sort_by_key(|&i| plan.enforced[i].index);
        let mut locked: SmallVec<[(usize, MutexGuard<'_, Releases>); 4]> = SmallVec::new();
        for &i in &order {
            if let Some(q) = &current.gates[plan.enforced[i].index] {
                locked.push((i, q.lock(now)));
            }
        }
        // 1. Priority classes: leave the reserve of the other classes. The
        //    request must fit with the reserve on top; if it does not, the
        //    limit's algorithm says when it will (a fixed window at its
        //    reset, not at the rate's refill). `plan` has refused what can
        //    never fit the class's share.
        for (i, _) in &locked {
            let p = &plan.enforced[*i];
            let reserve = p.limit.reserve_for(plan.class);
            if reserve == 0 {
                continue;
            }
            // A delay limit counts on its extended bucket.
            let extra = p.limit.delay.map_or(0, |d| d.extra);
            let need = p.cost.saturating_add(reserve).saturating_add(extra);
            let probe = self.store.peek_one(&Check {
                cost: need,
                ..p.memory_check(current)
            });
            match probe {
                Ok(d) if d.allowed => continue,
                Ok(d) => {
                    tracing::debug!(limit = %p.limit.name, "class share used up: refused");
                    let retry = d.retry_after.unwrap_or(1);
                    return Ok(self.refuse_one(current, plan, *i, retry));
                }
                Err(_) => return Err(beyond_share(p.limit, p.cost, reserve)),
            }
        }
        // 2. A full queue: refuse, without charging anything, what would wait.
        for (i, q) in &locked {
            let p = &plan.enforced[*i];
            let Some(d) = p.limit.delay else { continue };
            let pending = current.gates[p.index].as_ref().map_or(0, |g| g.pending());
            if q.len() + pending < d.max_queue {
                continue;
            }
            let remaining = self.peek(current, p).remaining;
            if remaining >= p.cost {
                continue;
            }
            let refill = p.limit.spec.rate.refill_time(p.cost - remaining);
            let slot = q.peek().map_or(0, |Reverse(t)| t.saturating_sub(now));
            tracing::debug!(limit = %p.limit.name, "delay queue full: refused");
            return Ok(self.refuse_one(current, plan, *i, refill.min(slot)));
        }
        let mut checked = self.check_enforced(current, plan)?;
        for (p, d) in plan.enforced.iter().zip(checked.decisions.iter_mut()) {
            *d = p.translate(*d, true);
            // A class sees what it may still use.
            d.remaining = d.remaining.saturating_sub(p.limit.reserve_for(plan.class));
        }
        if !checked.allowed
            && let Some(paid) = self.spend_credits(current, plan, &checked)?
        {
            checked = paid;
        }
        if checked.allowed {
            let wait = checked.decisions.iter().map(|d| d.delay).max().unwrap_or(0);
            if wait > 0 {
                for (i, q) in &mut locked {
                    if checked.decisions[*i].delay > 0 {
                        q.push(Reverse(now.saturating_add(wait)));
                    }
                }
            }
        }
        drop(locked);
        Ok(self.finish(current, plan, checked))
    }

    /// A limit as it stands for a key, as the client sees it (a peek).
    fn peek(&self, current: &Compiled, p: &Planned<'_>) -> Decision {
        self.store
            .peek_one(&Check {
                cost: 0,
                ..p.memory_check(current)
            })
            .map(|x| p.translate(x, false))
            .unwrap_or_else(|_| p.impossible())
    }

    /// The verdict refusing a request for the `i`-th enforced limit, with
    /// every limit as it stands (nothing is charged).
    fn refuse_one(&self, current: &Compiled, plan: &Plan<'_>, i: usize, retry: Nanos) -> Verdict {
        let decisions = plan
            .enforced
            .iter()
            .enumerate()
            .map(|(j, p)| {
                let mut d = self.peek(current, p);
                if j == i {
                    d.allowed = false;
                    d.remaining = 0;
                    d.retry_after = Some(retry.max(1));
                }
                d
            })
            .collect();
        let checked = Checked {
            allowed: false,
            decisions,
        };
        plan.verdict(checked, Vec::new(), None)
    }

    /// Admits a request refused only by its plan's limits when its key has
    /// the burst credits to pay for it: the other limits must still allow
    /// it (they are charged), and the credits are debited by the request's
    /// cost. `None` when credits do not apply or do not suffice.
    fn spend_credits(
        &self,
        current: &Compiled,
        plan: &Plan<'_>,
        checked: &Checked,
    ) -> Result<Option<Checked>, DecideError> {
        let Some(claim) = Claim::of(&current.policy, plan, checked) else {
            return Ok(None);
        };
        let mut credits = self.credits.lock().unwrap_or_else(PoisonError::into_inner);
        let balance = credits.get(&claim.key).copied().unwrap_or(0);
        if balance < claim.need {
            return Ok(None);
        }
        let checks: SmallVec<[Check<'_>; 4]> = claim
            .rest
            .iter()
            .map(|&i| plan.enforced[i].memory_check(current))
            .collect();
        let others = self.store.check(&checks).map_err(impossible)?;
        if !others.allowed {
            return Ok(None);
        }
        set_balance(&mut credits, claim.key, balance - claim.need);
        drop(credits);
        tracing::debug!(spent = claim.need, "burst credits spent");
        let others = claim
            .rest
            .iter()
            .zip(others.decisions)
            .map(|(&i, d)| plan.enforced[i].translate(d, true));
        Ok(Some(claim.paid(checked, others)))
    }

    /// Sets a client key's burst credits in this engine only: extra cost
    /// its plan's limits admit once their buckets are empty. (With a shared
    /// store, [`Engine::grant_credits`] sets them there.)
    pub fn set_credits(&self, key: &str, credits: u64) {
        self.mirror_credits(self.hasher.key_id(key), credits);
    }

    /// A client key's burst credits as this engine knows them.
    pub fn credits(&self, key: &str) -> u64 {
        self.credits_here(self.hasher.key_id(key))
    }

    /// Sets a client key's burst credits (the admin API's `PUT`): with a
    /// shared store, there first (every instance sees them), then here. If
    /// the store fails, nothing changes.
    pub async fn grant_credits(&self, key: &str, credits: u64) -> Result<(), RuntimeError> {
        let id = self.hasher.key_id(key);
        if let Some(state) = &self.runtime_state {
            state.set_credits(id, credits).await?;
        }
        self.mirror_credits(id, credits);
        Ok(())
    }

    /// A client key's burst credits now (the admin API's `GET`): read from
    /// the shared store when there is one (the balance every instance
    /// spends from); this engine's copy when there is none or it fails.
    pub async fn credits_now(&self, key: &str) -> u64 {
        let id = self.hasher.key_id(key);
        if let Some(state) = &self.runtime_state {
            match state.credits(id).await {
                Ok(n) => return n,
                Err(e) => tracing::debug!(error = %e, "credits read from the local copy"),
            }
        }
        self.credits_here(id)
    }

    fn credits_here(&self, id: KeyId) -> u64 {
        self.credits
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .copied()
            .unwrap_or(0)
    }

    fn mirror_credits(&self, id: KeyId, credits: u64) {
        let mut all = self.credits.lock().unwrap_or_else(PoisonError::into_inner);
        set_balance(&mut all, id, credits);
    }

    /// Which limits apply to a request, under which keys, enforced or in
    /// shadow: written into `plan` (empty).
    fn plan<'p>(
        &self,
        current: &'p Compiled,
        runtime: Option<&'p RuntimePlans>,
        req: &RequestInfo<'p>,
        plan: &mut Plan<'p>,
    ) -> Result<(), DecideError> {
        let access = current.policy.access(req);
        if access == Access::Denied {
            return Err(DecideError::Denied);
        }
        // Runtime plans are kept by key id: the key is hashed only when
        // some exist.
        let runtime_plan = |key: &str| runtime.and_then(|r| r.plan(self.hasher.key_id(key)));
        // Hash each distinct client key once: limits with the same key
        // source have the same key.
        let mut ids: SmallVec<[(&'p crate::KeySource, KeyId); 4]> = SmallVec::new();
        let mut place = |a: &crate::policy::Applied<'p>| {
            let key = match ids.iter().find(|(source, _)| **source == a.limit.key) {
                Some((_, id)) => *id,
                None => {
                    let id = self.hasher.key_id_bytes(a.key.as_bytes());
                    ids.push((&a.limit.key, id));
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
                plan.enforced.push(planned);
            } else {
                plan.shadowed.push(planned);
            }
            Ok(())
        };
        current.policy.resolve_each(req, runtime_plan, &mut place)?;
        // The client's plan is its priority class, where a limit has some.
        if plan
            .enforced
            .iter()
            .any(|p: &Planned<'_>| !p.limit.max_share.is_empty())
        {
            plan.class = current.policy.client_plan(req, &runtime_plan);
            // A cost beyond the class's share can never pass, on any store.
            for p in &plan.enforced {
                let reserve = p.limit.reserve_for(plan.class);
                if reserve > 0 && p.cost > p.limit.spec.burst - reserve {
                    return Err(beyond_share(p.limit, p.cost, reserve));
                }
            }
        }
        Ok(())
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

    fn result(&self, decision: Decision) -> LimitResult {
        LimitResult {
            spec: self.limit.spec,
            decision,
            labels: self.limit.labels.clone(),
            key: self.key,
        }
    }

    /// A decision on a delay limit's extended bucket, as the client sees
    /// it: its burst as the limit, the extension not counted in
    /// `remaining`, and (`hold`: for an enforced, admitted request) the time
    /// until the bucket is back within its burst as the delay.
    fn translate(&self, d: Decision, hold: bool) -> Decision {
        self.translate_on(d, &self.limit.spec, hold)
    }

    /// [`translate`](Self::translate) for an extended bucket whose plain
    /// part is `plain` (the limit itself, or the local fallback's share of
    /// it): the extension is whatever the decision's limit holds above it.
    fn translate_on(&self, d: Decision, plain: &LimitSpec, hold: bool) -> Decision {
        let Some(delay) = self.limit.delay else {
            return d;
        };
        let extra = d.limit.saturating_sub(plain.burst);
        let mut out = Decision {
            limit: plain.burst,
            remaining: d.remaining.saturating_sub(extra),
            ..d
        };
        let used = d.limit.saturating_sub(d.remaining);
        if d.allowed && hold && used > plain.burst {
            out.delay = plain
                .rate
                .refill_time(used - plain.burst)
                .min(delay.max_delay);
        }
        out
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
    /// The client's plan, when a limit has priority classes.
    class: Option<&'p str>,
    style: HeadersConfig,
}

impl Plan<'_> {
    /// An empty plan, to be filled by [`Engine::plan`] in place (a plan is
    /// large enough that moving it shows on the request path).
    fn new(style: HeadersConfig) -> Self {
        Self {
            enforced: SmallVec::new(),
            shadowed: SmallVec::new(),
            class: None,
            style,
        }
    }

    /// The verdict admitting a request under its one enforced limit, with
    /// no shadowed ones.
    fn verdict_of_one(&self, result: LimitResult) -> Verdict {
        Verdict {
            allowed: true,
            results: vec![result],
            shadow: Vec::new(),
            style: self.style,
            fallback: None,
        }
    }

    fn verdict(
        &self,
        checked: Checked,
        shadow: Vec<LimitResult>,
        fallback: Option<Fallback>,
    ) -> Verdict {
        for r in &shadow {
            if !r.decision.allowed {
                tracing::info!(limit = %r.name(), "shadow: would have been limited");
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

/// A request refused only by limits of its plan counted by the client key:
/// what burst credits would have to pay.
struct Claim {
    /// The client key.
    key: KeyId,
    /// The credits it would cost: the largest cost among the refusing
    /// limits.
    need: u64,
    /// The refusing limits (indices into the plan's enforced limits).
    violated: SmallVec<[usize; 4]>,
    /// The other enforced limits, which must still admit the request.
    rest: SmallVec<[usize; 4]>,
}

impl Claim {
    /// The claim of a refused request; `None` when a limit outside the
    /// client's plan refused it (or nothing did).
    fn of(policy: &Policy, plan: &Plan<'_>, checked: &Checked) -> Option<Self> {
        let client = policy.client_key()?;
        let (violated, rest): (SmallVec<[usize; 4]>, SmallVec<[usize; 4]>) =
            (0..plan.enforced.len()).partition(|&i| !checked.decisions[i].allowed);
        let &first = violated.first()?;
        let plan_only = violated.iter().all(|&i| {
            let l = plan.enforced[i].limit;
            l.plan.is_some() && l.key == *client
        });
        if !plan_only {
            return None;
        }
        let need = violated
            .iter()
            .map(|&i| plan.enforced[i].cost)
            .max()
            .unwrap_or(0);
        Some(Self {
            key: plan.enforced[first].key,
            need,
            violated,
            rest,
        })
    }

    /// The decisions of the request once paid: the refusing limits admit
    /// it with nothing left, the others as they decided (in `rest` order).
    fn paid(&self, checked: &Checked, others: impl IntoIterator<Item = Decision>) -> Checked {
        let mut decisions = checked.decisions.clone();
        for &i in &self.violated {
            decisions[i] = Decision {
                allowed: true,
                remaining: 0,
                retry_after: None,
                delay: 0,
                ..decisions[i]
            };
        }
        for (&i, d) in self.rest.iter().zip(others) {
            decisions[i] = d;
        }
        Checked {
            allowed: true,
            decisions,
        }
    }
}

/// Sets a balance in a credits map (0 removes the key).
fn set_balance(all: &mut HashMap<KeyId, u64>, id: KeyId, credits: u64) {
    if credits == 0 {
        all.remove(&id);
    } else {
        all.insert(id, credits);
    }
}

/// A cost no limit could ever admit, as a decision error.
/// A request whose cost exceeds what its priority class may ever use of a
/// limit (the burst less the other classes' reserve).
fn beyond_share(limit: &LimitDef, cost: u64, reserve: u64) -> DecideError {
    DecideError::Impossible {
        limit: limit.name.to_string(),
        cost,
        capacity: limit.spec.burst.saturating_sub(reserve),
    }
}

fn impossible(e: sluice_core::CheckError) -> DecideError {
    match e {
        sluice_core::CheckError::CostExceedsCapacity { cost, capacity } => {
            DecideError::Impossible {
                limit: String::new(),
                cost,
                capacity,
            }
        }
    }
}

/// The limits a plan change carries used quota between: `(old, new)`
/// pairs of limit indices, paired by name, else by position, among the
/// limits counted by the client key. Empty with `carry_over = "reset"` or
/// the same plan.
fn carry_pairs(policy: &Policy, from: &str, to: &str) -> Vec<(usize, usize)> {
    if from == to || policy.carry_over == CarryOver::Reset {
        return Vec::new();
    }
    let Some(client) = policy.client_key() else {
        return Vec::new();
    };
    let eligible = |plan: &str| -> Vec<usize> {
        policy
            .plan_limits(plan)
            .iter()
            .copied()
            .filter(|&i| policy.limits()[i].key == *client)
            .collect()
    };
    let (old, new) = (eligible(from), eligible(to));
    new.iter()
        .enumerate()
        .filter_map(|(n, &ni)| {
            old.iter()
                .copied()
                .find(|&oi| policy.limits()[oi].name == policy.limits()[ni].name)
                .or_else(|| old.get(n).copied())
                .map(|oi| (oi, ni))
        })
        .collect()
}

/// What the new limit must be charged so that its used share matches the
/// old one's (rounded to nearest; never a refund).
fn carry_charge(old_def: &LimitDef, new_def: &LimitDef, used_old: u64, used_new: u64) -> u64 {
    let (b_old, b_new) = (old_def.spec.burst.max(1), new_def.spec.burst);
    let target =
        (u128::from(used_old) * u128::from(b_new) + u128::from(b_old / 2)) / u128::from(b_old);
    let target = u64::try_from(target).unwrap_or(b_new).min(b_new);
    target.saturating_sub(used_new)
}

/// Whether a limit is enforced for a key: not in shadow, and the key falls
/// in its `enforce_percent` (sticky: by the key's keyed hash).
fn is_enforced(shadow: bool, percent: u8, key: KeyId) -> bool {
    !shadow && (percent >= 100 || key.low() % 100 < u64::from(percent))
}

impl Compiled {
    /// Compiles a policy's state; delay queues of limits whose identity is
    /// unchanged from `old` carry over with the requests they hold.
    fn new<C: Clock>(policy: Policy, store: &MemoryStore<C>, old: Option<&Compiled>) -> Self {
        let limits = policy
            .limits()
            .iter()
            .map(|def| store.limit(&def.id, def.delay.map_or(def.limiter, |d| d.limiter)))
            .collect();
        let gates = policy
            .limits()
            .iter()
            .map(|def| {
                if def.delay.is_none() && def.max_share.is_empty() {
                    return None;
                }
                let kept = old.and_then(|o| {
                    o.policy
                        .limits()
                        .iter()
                        .position(|l| l.id == def.id)
                        .and_then(|i| o.gates[i].clone())
                });
                Some(kept.unwrap_or_default())
            })
            .collect();
        Self {
            policy: Arc::new(policy),
            limits,
            gates,
        }
    }
}

/// The watcher of the shared store's runtime state replaces this engine's
/// copies with what it loads.
impl<C: Clock> RuntimeSink for Engine<C> {
    fn plans_loaded(&self, plans: HashMap<KeyId, String>) {
        self.runtime_plans.update(|m| m.mirrored(plans.clone()));
    }

    fn credits_loaded(&self, credits: HashMap<KeyId, u64>) {
        *self.credits.lock().unwrap_or_else(PoisonError::into_inner) = credits;
    }
}
