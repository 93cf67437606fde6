//! The decision engine: a policy over a store, answering "may this request
//! pass?" over every limit that applies to it, all-or-nothing, on one path
//! whatever the store.
//!
//! - `plan.rs`: which limits apply to a request, under which keys;
//! - `decide.rs`: the one decision path (classes, delay, credits, shadow);
//! - `alike.rs`: that path's steps for a policy whose limits every
//!   request meets alike (the usual small deployment), without a plan;
//! - `charges.rs`: limits an adapter matched itself (Envoy descriptors);
//! - `credits.rs`: burst credits; `carry.rs`: carry-over between plans;
//! - `verdict.rs`: what the engine answers; `outcome.rs`: how a request
//!   ends.

mod alike;
mod carry;
mod charges;
mod compiled;
mod credits;
mod current;
mod decide;
mod outcome;
mod plan;
mod reservation;
mod slot_wait;
mod verdict;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_core::{Clock, SystemClock};
use sluice_store::seam::{PlansSink, RemoteHealth, RuntimeStore, Store};
use sluice_store::{KeyHasher, KeyId, MemoryRuntime, MemoryStore, MemoryStoreConfig};

use crate::policy::{Policy, RequestInfo};
use crate::runtime::{RuntimePlans, RuntimePlansCell};
use compiled::Compiled;
use plan::Plan;

pub use charges::{Charge, Counting};
pub use outcome::Outcome;
pub use reservation::{Debt, Reservation, Reserved, SettledLimit};
pub use verdict::{
    DecideError, LimitResult, PlanSource, Results, RuntimeError, SaveError, Shadow, UnknownPlan,
    Verdict,
};

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
///     peer: Some("192.0.2.1".parse()?), cost: None, body: None,
/// };
/// // The memory store answers at once: no runtime needed.
/// assert!(engine.decide_now(&req).unwrap()?.allowed);
/// assert!(!engine.decide_now(&req).unwrap()?.allowed);
/// # Ok(()) }
/// ```
///
/// The policy can be replaced while requests are decided
/// ([`Engine::replace_policy`]): each decision reads one policy from start to
/// end, and limits whose definition did not change keep their counters.
pub struct Engine<C: Clock = SystemClock> {
    current: current::Current,
    /// Plans assigned at run time, by client key id; they beat the
    /// config's. With a shared runtime store, a mirror of its assignments.
    runtime_plans: RuntimePlansCell,
    store: Arc<dyn Store>,
    runtime: Arc<dyn RuntimeStore>,
    hasher: KeyHasher,
    clock: C,
    /// Whether the store answers at once (in this process).
    at_once: bool,
    /// Whether the policy in force reads the request's host (kept beside
    /// it, for adapters that ask before every request).
    reads_host: std::sync::atomic::AtomicBool,
    /// Whether a settle rule of the policy in force takes its estimate
    /// from the request's JSON body.
    reads_body: std::sync::atomic::AtomicBool,
    /// The longest a request waits for burst credits to be spent.
    credit_wait: Duration,
    /// The lines logged for shadowed limits that would have refused: at
    /// most ten a second, in bursts of twenty.
    shadow_lines: crate::log_budget::LogBudget,
    /// The lines logged for costs a client or upstream sent that are not
    /// costs (negative, not whole numbers, in two fields): at most ten a
    /// second, in bursts of twenty.
    cost_lines: crate::log_budget::LogBudget,
}

impl<C: Clock> std::fmt::Debug for Engine<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("store", &self.store)
            .field("runtime", &self.runtime)
            .finish_non_exhaustive()
    }
}

impl Engine<SystemClock> {
    /// An engine with a fresh in-memory store of the default size (a
    /// million keys per limit).
    pub fn new(policy: Policy) -> Self {
        Self::in_memory(policy, MemoryStoreConfig::default().max_keys)
    }

    /// An engine with a fresh in-memory store tracking at most `max_keys`
    /// keys per limit (a config's `[store] max_keys`:
    /// [`Deployment::store`](crate::Deployment::store)).
    pub fn in_memory(policy: Policy, max_keys: usize) -> Self {
        let store = MemoryStore::new(MemoryStoreConfig {
            max_keys,
            shards: 0,
        });
        Self::with_store(policy, Arc::new(store), KeyHasher::random())
    }
}

impl<C: Clock + Clone + 'static> Engine<C> {
    /// An engine over an existing memory store (shared with other engines,
    /// or on a manual clock), with runtime state in this process.
    pub fn with_store(policy: Policy, store: Arc<MemoryStore<C>>, hasher: KeyHasher) -> Self {
        let clock = store.clock().clone();
        Self::on(
            policy,
            store,
            Arc::new(MemoryRuntime::default()),
            hasher,
            clock,
        )
    }
}

impl<C: Clock> Engine<C> {
    /// An engine over any store and runtime state store: a shared store
    /// (Redis behind its protection) and its runtime state, say. The hasher
    /// must be keyed by the secret every instance shares, so that they name
    /// a client's keys alike.
    pub fn on(
        policy: Policy,
        store: Arc<dyn Store>,
        runtime: Arc<dyn RuntimeStore>,
        hasher: KeyHasher,
        clock: C,
    ) -> Self {
        let plans = policy
            .runtime_keys
            .as_ref()
            .map(|r| RuntimePlans::from_keys(&r.loaded, &hasher))
            .unwrap_or_default();
        let reads_host = std::sync::atomic::AtomicBool::new(policy.reads_host());
        let reads_body = std::sync::atomic::AtomicBool::new(policy.reads_request_body());
        let compiled = Compiled::new(policy, store.as_ref(), &hasher, None);
        // A decision may spend credits: both stores must answer at once
        // for `decide_now` to finish what it starts.
        let at_once = store.answers_at_once() && runtime.answers_at_once();
        Self {
            current: current::Current::new(compiled),
            runtime_plans: RuntimePlansCell::new(plans),
            store,
            runtime,
            hasher,
            clock,
            at_once,
            reads_host,
            reads_body,
            credit_wait: Duration::from_millis(10),
            shadow_lines: crate::log_budget::LogBudget::new(10, 20),
            cost_lines: crate::log_budget::LogBudget::new(10, 20),
        }
    }

    /// Sets the longest a request waits for burst credits to be spent on a
    /// shared runtime store (the store's timeout, say; 10 ms by default).
    pub fn with_credit_wait(mut self, wait: Duration) -> Self {
        self.credit_wait = wait;
        self
    }

    /// With a shared runtime store, polls its plans every `every` in the
    /// background, so that changes made through any instance apply here;
    /// the task ends when the engine is dropped. Returns whether it was
    /// started (not for runtime state in memory). Must be called within a
    /// tokio runtime.
    pub fn watch_runtime_state(self: &Arc<Self>, every: Duration) -> bool
    where
        C: 'static,
    {
        let sink: std::sync::Weak<dyn PlansSink> = Arc::downgrade(self) as _;
        self.runtime.watch(sink, every)
    }

    /// The policy in force now.
    pub fn policy(&self) -> Arc<Policy> {
        self.current.load().policy.clone()
    }

    /// `read` of the policy in force now, without taking a count of it:
    /// for what runs on every request, where [`policy`](Self::policy)'s
    /// count, shared by every thread, would move between their caches.
    pub fn read_policy<R>(&self, read: impl FnOnce(&Policy) -> R) -> R {
        read(&self.current.load().policy)
    }

    /// Whether a limit or cost rule of the policy in force matches on the
    /// request's host (one relaxed load: adapters ask before every
    /// request).
    pub fn reads_host(&self) -> bool {
        self.reads_host.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// For a store over the network: how it and its protection are doing.
    pub fn remote_health(&self) -> Option<RemoteHealth> {
        self.store.remote_health()
    }

    /// The clock decisions are made on.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The hasher that names client keys.
    pub fn hasher(&self) -> &KeyHasher {
        &self.hasher
    }

    /// Replaces the policy. Requests being decided finish on the old one;
    /// the next ones see the new one. A limit whose identity (scope, name
    /// and definition) is unchanged keeps its counters; a new or changed one
    /// starts fresh.
    pub fn replace_policy(&self, policy: Policy) {
        let reads_host = policy.reads_host();
        let reads_body = policy.reads_request_body();
        self.current
            .replace(|old| Compiled::new(policy, self.store.as_ref(), &self.hasher, Some(old)));
        self.reads_host
            .store(reads_host, std::sync::atomic::Ordering::Relaxed);
        self.reads_body
            .store(reads_body, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether a settle rule of the policy in force takes its estimate
    /// from the request's JSON body (`estimate = "json:<field>"`): an
    /// adapter then reads the body's top-level numbers before deciding
    /// and gives them in [`RequestInfo::body`] (one relaxed load).
    pub fn reads_request_body(&self) -> bool {
        self.reads_body.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether a limit of the policy in force settles its cost after the
    /// response: its decisions keep a reservation
    /// ([`decide_reserving`](Self::decide_reserving)), to be settled. Read
    /// from the compiled policy, as [`decide_now`](Self::decide_now) reads
    /// it.
    pub fn settles(&self) -> bool {
        self.current.load().settles
    }

    /// Decides a request over every limit that applies to it.
    ///
    /// Limits match on the request's [canonical path](crate::path): any
    /// spelling of `/export` is charged to `/export`'s limits, and a path
    /// with no canonical form is refused with [`DecideError::Path`].
    pub async fn decide(&self, req: &RequestInfo<'_>) -> Result<Verdict, DecideError> {
        self.decide_reserving(req).await.map(|(verdict, _)| verdict)
    }

    /// [`decide`](Self::decide), done now, when the store answers at once
    /// (the memory store): `None` when it does not, or when a limit of the
    /// policy in force settles its cost after the response (its decision
    /// keeps a reservation: [`decide_reserving`](Self::decide_reserving)),
    /// and nothing was decided. For callers that avoid a future where they
    /// can (the tower layer); `decide_reserving` starts with it. The same
    /// steps as `decide`, without a future; a policy of one limit that
    /// every request meets alike takes them without a plan (`alike.rs`).
    #[inline]
    pub fn decide_now(&self, req: &RequestInfo<'_>) -> Option<Result<Verdict, DecideError>> {
        if !self.at_once {
            return None;
        }
        // A guarded load: nothing here outlives this call.
        let current = self.current.load();
        if current.settles {
            return None;
        }
        if let Some(alike::Alike::One(met)) = &current.alike {
            // A limit met alike has no `match`: the path is only checked,
            // not rewritten.
            if let Err(e) = checked(&current.policy, req) {
                return Some(Err(e));
            }
            if let Some(decided) = self.decide_one_alike(&current, met, req) {
                return Some(decided);
            }
        }
        self.decide_planned_now(&current, req)
    }

    /// The rest of [`decide_now`](Self::decide_now): several limits met
    /// alike, or a plan; also one limit met alike on a store that answers
    /// at once but not through [`Store::check_one_now`], which a store need
    /// not implement: planned, it is decided by [`Store::check`]. Out of
    /// line, so that the usual request's frame holds one answer.
    #[inline(never)]
    fn decide_planned_now(
        &self,
        current: &Compiled,
        req: &RequestInfo<'_>,
    ) -> Option<Result<Verdict, DecideError>> {
        if let Some(alike::Alike::All(all)) = &current.alike {
            // As for one limit: the path is only checked.
            if let Err(e) = checked(&current.policy, req) {
                return Some(Err(e));
            }
            // Its answer as it is (returned in place, not copied). `None`
            // when the store did not answer at once, as a plan of these
            // limits would not be either.
            return self.decide_all_alike(current, all, req);
        }
        if let Err(e) = host_checked(&current.policy, req) {
            return Some(Err(e));
        }
        let path = match crate::path::canonical(req.path) {
            Ok(p) => p,
            Err(e) => return Some(Err(e.into())),
        };
        let req = &RequestInfo {
            path: &path,
            ..*req
        };
        let runtime = self.runtime_plans.in_force();
        let mut plan = Plan::new(current.policy.headers);
        if let Err(e) = self.plan(current, runtime.as_deref().map(Arc::as_ref), req, &mut plan) {
            return Some(Err(e));
        }
        self.decide_plan_now(&plan)
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

    /// Puts a client key on a plan at run time, over the config's
    /// assignment: in the runtime state store first (with a shared one,
    /// every instance applies it within a poll), then here. If the store
    /// fails, nothing changes. With `[client] carry_over = "proportional"`
    /// (the default), the key keeps the share of quota it has used (see
    /// `carry.rs`).
    pub async fn set_plan(&self, key: &str, plan: &str) -> Result<(), RuntimeError> {
        if !self.current.load().policy.has_plan(plan) {
            return Err(UnknownPlan(plan.to_owned()).into());
        }
        let before = self.plan_of(key).map(|(p, _)| p);
        let id = self.hasher.key_id(key);
        self.runtime.set_plan(id, plan).await?;
        self.runtime_plans.update(|m| m.with(id, key, plan));
        if let Some(before) = before {
            self.carry_over(key, &before, plan).await;
        }
        Ok(())
    }

    /// Removes a key's runtime assignment: from the runtime state store
    /// first, then here. Returns whether it had one. The key goes back to
    /// its config plan, with the same carry-over as [`Engine::set_plan`].
    pub async fn clear_plan(&self, key: &str) -> Result<bool, RuntimeError> {
        let before = self.plan_of(key).map(|(p, _)| p);
        let id = self.hasher.key_id(key);
        let remote = self.runtime.remove_plan(id).await?;
        let mut had = false;
        self.runtime_plans.update(|m| {
            let (next, removed) = m.without(id);
            had = removed;
            next
        });
        if let (Some(before), Some((after, _))) = (before, self.plan_of(key)) {
            self.carry_over(key, &before, &after).await;
        }
        Ok(had || remote)
    }

    /// The runtime assignments now whose raw key this process knows (made
    /// through it, or loaded from `runtime_keys_file`), sorted by key. With
    /// a shared runtime store, assignments made through other instances are
    /// known here only by key id, and are not listed.
    pub fn runtime_assignments(&self) -> BTreeMap<String, String> {
        self.runtime_plans.load().named()
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

    /// Sets a client key's burst credits: extra cost its plan's limits
    /// admit once their buckets are empty. If the runtime state store
    /// fails, nothing changes.
    pub async fn grant_credits(&self, key: &str, credits: u64) -> Result<(), RuntimeError> {
        let id = self.hasher.key_id(key);
        self.runtime.set_credits(id, credits).await?;
        Ok(())
    }

    /// A client key's burst credits now, as the runtime state store has
    /// them (0 when it cannot say).
    pub async fn credits(&self, key: &str) -> u64 {
        let id: KeyId = self.hasher.key_id(key);
        match self.runtime.credits(id).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!(error = %e, "credits could not be read");
                0
            }
        }
    }
}

/// The watcher of a shared runtime store replaces this engine's copy of
/// the runtime plans with what it loads.
impl<C: Clock> PlansSink for Engine<C> {
    fn plans_loaded(&self, plans: HashMap<KeyId, String>) {
        self.runtime_plans.update(|m| m.mirrored(plans.clone()));
    }
}

/// Whether a request's path has a canonical form (without building it)
/// and its host is unambiguous: what a request met by limits without a
/// `match` must pass.
#[inline]
fn checked(policy: &Policy, req: &RequestInfo<'_>) -> Result<(), DecideError> {
    crate::path::check(req.path)?;
    host_checked(policy, req)
}

/// The request's host is unambiguous, when a limit reads it: otherwise one
/// host could be limited and another served. (A policy that reads no host
/// cannot be slipped past by one; Sluice's own data plane checks every
/// request's host, whatever the policy.)
#[inline]
fn host_checked(policy: &Policy, req: &RequestInfo<'_>) -> Result<(), DecideError> {
    if policy.reads_host() {
        crate::host::check(req.headers)?;
    }
    Ok(())
}
