//! Adaptive overload protection of the upstream: the shared state behind
//! [`OverloadLayer`](crate::overload_layer::OverloadLayer).
//!
//! One [`Overload`] per Sluice instance holds the [`Gate`] of
//! `sluice_core::adaptive` for the `[overload]` settings in force (the
//! policy's, followed across reloads, or fixed ones given in code), finds a
//! request's priority class from its client's plan, and counts what it
//! sheds. A reload that leaves the gate's parameters alone keeps the gate
//! and what it learned; one that changes them starts a new gate, and the
//! counters carry over by class name.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use http::{Extensions, HeaderMap, Method};
use serde::Serialize;
use sluice_core::adaptive::{Entry, Gate, MAX_CLASSES, Outcome};
use sluice_policy::{Engine, OverloadSettings, RequestInfo};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::layer::PeerFn;

/// The gate of one set of settings, with what it shed.
#[derive(Debug)]
pub struct GateState {
    /// The gate.
    pub gate: Gate,
    /// Requests answered 503, by class.
    shed: [AtomicU64; MAX_CLASSES],
}

/// The settings in force, and their gate (none when off).
#[derive(Debug)]
struct Generation {
    settings: Arc<OverloadSettings>,
    state: Option<Arc<GateState>>,
}

/// Totals of a class from gates no longer in use.
#[derive(Debug, Default, Clone, Copy)]
struct Carried {
    admitted: u64,
    shed: u64,
}

/// Where the settings come from.
#[derive(Debug, Clone)]
enum SettingsSource {
    /// The engine's policy in force (`[overload]` of the config).
    Policy,
    /// Given in code.
    Fixed(Arc<OverloadSettings>),
}

/// The overload protection of one instance, shared by every request.
pub struct Overload {
    engine: Arc<Engine>,
    source: SettingsSource,
    peer: PeerFn,
    started: Instant,
    current: ArcSwap<Generation>,
    /// Serialises the replacement of `current`, and keeps the carried totals.
    carried: parking_lot::Mutex<BTreeMap<String, Carried>>,
    /// Requests waiting for room now.
    waiting: AtomicUsize,
    /// Told when a request leaves the gate, while some wait.
    room: Notify,
}

impl std::fmt::Debug for Overload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Overload")
            .field("settings", &self.current.load().settings)
            .finish_non_exhaustive()
    }
}

/// A request's class and whether it may wait, as its plan decides.
#[derive(Debug, Clone)]
pub struct Placement {
    /// Its class, 0 the lowest.
    pub class: usize,
    /// How long it may wait when shed; `None`: refused at once.
    pub max_wait: Option<Duration>,
}

/// What became of an attempt to enter.
#[derive(Debug)]
pub enum Admit {
    /// Off: the request goes on without a gate.
    Off,
    /// Admitted: hold the admission until the response ends.
    In(Admission),
    /// Shed; the settings say whether it may wait.
    Shed {
        /// The gate's refusal.
        shed: sluice_core::adaptive::Shed,
        /// The class's name.
        class: String,
        /// How long it may wait.
        max_wait: Option<Duration>,
    },
}

impl Overload {
    /// Protection following the `[overload]` settings of `engine`'s policy
    /// in force (off while the policy has none).
    pub fn new(engine: Arc<Engine>) -> Self {
        Self::with_source(engine, SettingsSource::Policy)
    }

    /// Protection with fixed settings, whatever the policy says.
    pub fn with_settings(engine: Arc<Engine>, settings: OverloadSettings) -> Self {
        Self::with_source(engine, SettingsSource::Fixed(Arc::new(settings)))
    }

    fn with_source(engine: Arc<Engine>, source: SettingsSource) -> Self {
        let off = Arc::new(OverloadSettings::default());
        Self {
            engine,
            source,
            peer: Arc::new(crate::layer::socket_peer),
            started: Instant::now(),
            current: ArcSwap::from_pointee(Generation {
                settings: off,
                state: None,
            }),
            carried: parking_lot::Mutex::new(BTreeMap::new()),
            waiting: AtomicUsize::new(0),
            room: Notify::new(),
        }
    }

    /// Finds the client address with `peer` (for the client key of `ip`
    /// plans) instead of the socket peer.
    pub fn set_peer(&mut self, peer: PeerFn) {
        self.peer = peer;
    }

    /// Nanoseconds since this protection started: the gate's clock.
    pub fn now(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The settings in force.
    pub fn settings(&self) -> Arc<OverloadSettings> {
        self.generation().settings.clone()
    }

    /// The generation for the settings in force, replaced first if they
    /// changed. Every request asks: while they have not changed, it takes
    /// no count of the settings or the generation.
    fn generation(&self) -> Guard<Arc<Generation>> {
        let current = self.current.load();
        let in_force = match &self.source {
            SettingsSource::Policy => self
                .engine
                .read_policy(|p| Arc::ptr_eq(&current.settings, p.overload())),
            SettingsSource::Fixed(s) => Arc::ptr_eq(&current.settings, s),
        };
        if in_force {
            return current;
        }
        drop(current);
        self.replace_generation();
        self.current.load()
    }

    /// Puts a generation for the settings in force in place of one for
    /// settings that changed, carrying the gate's state over where it can.
    #[cold]
    fn replace_generation(&self) {
        let wanted = match &self.source {
            SettingsSource::Policy => self.engine.policy().overload().clone(),
            SettingsSource::Fixed(s) => s.clone(),
        };
        let mut carried = self.carried.lock();
        let current = self.current.load_full();
        if Arc::ptr_eq(&current.settings, &wanted) {
            return;
        }
        let kept = current
            .state
            .as_ref()
            .filter(|_| wanted.enabled && current.settings.gate == wanted.gate)
            .cloned();
        let state = match kept {
            Some(s) => Some(s),
            None => {
                if let Some(old) = &current.state {
                    carry(&mut carried, &current.settings, old);
                }
                new_state(&wanted)
            }
        };
        self.current.store(Arc::new(Generation {
            settings: wanted,
            state,
        }));
    }

    /// Where a request goes: its class and wait, from its client's plan.
    pub fn place(
        &self,
        settings: &OverloadSettings,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Placement {
        let plan = if settings.needs_plan() {
            let info = RequestInfo {
                method,
                path,
                headers,
                peer: (self.peer)(headers, extensions),
                cost: None,
                body: None,
            };
            let policy = self.engine.policy();
            let key = policy.client_of(&info);
            key.and_then(|k| self.engine.plan_of(&k).map(|(p, _)| p))
        } else {
            None
        };
        Placement {
            class: settings.class_of(plan.as_deref()),
            max_wait: settings.max_wait(plan.as_deref()),
        }
    }

    /// Tries to admit a request with these request parts.
    pub fn try_admit(
        self: &Arc<Self>,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        extensions: &Extensions,
    ) -> Admit {
        let generation = self.generation();
        let Some(state) = generation.state.clone() else {
            return Admit::Off;
        };
        let settings = &generation.settings;
        let place = self.place(settings, method, path, headers, extensions);
        match state.gate.try_enter(place.class, self.now()) {
            Ok(entry) => Admit::In(Admission::new(self.clone(), state, entry)),
            Err(shed) => Admit::Shed {
                shed,
                class: class_name(settings, shed.class),
                max_wait: place.max_wait,
            },
        }
    }

    /// After a shed that may wait: waits up to `max_wait` for a request to
    /// leave (not at all when [`max_waiting`](OverloadSettings::max_waiting)
    /// already wait), then tries once more in the same class.
    pub async fn wait_and_retry(
        self: &Arc<Self>,
        class: usize,
        max_wait: Duration,
    ) -> Result<Admission, sluice_core::adaptive::Shed> {
        // Read, not held across the wait.
        let limit = self.generation().settings.max_waiting;
        let queued = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok();
        if queued {
            let _ = tokio::time::timeout(max_wait, self.room.notified()).await;
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
        let generation = self.generation();
        let Some(state) = generation.state.clone() else {
            return Err(sluice_core::adaptive::Shed {
                class,
                retry_after: 0,
                limit: 0,
                in_flight: 0,
            });
        };
        match state.gate.try_enter(class, self.now()) {
            Ok(entry) => Ok(Admission::new(self.clone(), state, entry)),
            Err(shed) => Err(shed),
        }
    }

    /// Counts a request answered 503 in `class` of the gate in force.
    pub fn count_shed(&self, class: usize) {
        if let Some(s) = &self.generation().state {
            s.shed[class.min(MAX_CLASSES - 1)].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The state for metrics and the status page; `None` while off.
    pub fn snapshot(&self) -> Option<OverloadSnapshot> {
        let generation = self.generation();
        let state = generation.state.as_ref()?;
        let g = state.gate.snapshot();
        let carried = self.carried.lock();
        let classes = g
            .classes
            .iter()
            .enumerate()
            .map(|(k, c)| {
                let name = class_name(&generation.settings, k);
                let before = carried.get(&name).copied().unwrap_or_default();
                ClassStatus {
                    in_flight: c.in_flight,
                    threshold: c.threshold,
                    admitted: before.admitted + c.admitted,
                    shed: before.shed + state.shed[k].load(Ordering::Relaxed),
                    name,
                }
            })
            .collect();
        Some(OverloadSnapshot {
            limit: g.limit,
            in_flight: g.in_flight,
            min_latency_s: g.min_latency.map(secs),
            last_latency_s: g.last_latency.map(secs),
            classes,
        })
    }

    /// A request left: wake a waiter, if any.
    fn left(&self) {
        if self.waiting.load(Ordering::Acquire) > 0 {
            self.room.notify_one();
        }
    }
}

fn secs(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// The name of class `k` under `settings`.
pub fn class_name(settings: &OverloadSettings, k: usize) -> String {
    settings
        .classes
        .get(k)
        .cloned()
        .unwrap_or_else(|| k.to_string())
}

/// A gate for `settings`, or none when they are off.
fn new_state(settings: &OverloadSettings) -> Option<Arc<GateState>> {
    if !settings.enabled {
        return None;
    }
    match Gate::new(settings.gate) {
        Ok(gate) => Some(Arc::new(GateState {
            gate,
            shed: std::array::from_fn(|_| AtomicU64::new(0)),
        })),
        Err(e) => {
            // Compiled settings are validated: this is a bug, not an input.
            tracing::error!(error = %e, "overload protection off: bad gate settings");
            None
        }
    }
}

/// Adds a retired gate's totals to `carried`, by class name.
fn carry(carried: &mut BTreeMap<String, Carried>, settings: &OverloadSettings, old: &GateState) {
    for (k, c) in old.gate.snapshot().classes.iter().enumerate() {
        let entry = carried.entry(class_name(settings, k)).or_default();
        entry.admitted += c.admitted;
        entry.shed += old.shed[k].load(Ordering::Relaxed);
    }
}

/// Overload protection's state, for metrics and the status page.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OverloadSnapshot {
    /// The current concurrency limit.
    pub limit: u32,
    /// Requests in flight to the upstream, all classes.
    pub in_flight: u32,
    /// The minimum latency estimate, in seconds, once known.
    pub min_latency_s: Option<f64>,
    /// The last sampling window's latency, in seconds, once known.
    pub last_latency_s: Option<f64>,
    /// Each class, the lowest first.
    pub classes: Vec<ClassStatus>,
}

/// One class in an [`OverloadSnapshot`].
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClassStatus {
    /// Its name: the plan, or `all` with a single class.
    pub name: String,
    /// Its requests in flight.
    pub in_flight: u32,
    /// The total in flight below which it is admitted now.
    pub threshold: u32,
    /// Its requests admitted so far.
    pub admitted: u64,
    /// Its requests answered 503 so far.
    pub shed: u64,
}

/// An admitted request's place in the gate, held until its response ends
/// (the layer keeps it in the response body). Dropped without
/// [`finish`](Admission::finish), it leaves as cancelled.
#[derive(Debug)]
pub struct Admission {
    overload: Arc<Overload>,
    state: Arc<GateState>,
    entry: Option<Entry>,
    /// When the response head came, and how it ended so far.
    head: Option<(u64, Outcome)>,
}

impl Admission {
    fn new(overload: Arc<Overload>, state: Arc<GateState>, entry: Entry) -> Self {
        Self {
            overload,
            state,
            entry: Some(entry),
            head: None,
        }
    }

    /// The response head came now, with this outcome: its latency is
    /// measured to here, whenever the body ends.
    pub fn head(&mut self, outcome: Outcome) {
        self.head = Some((self.overload.now(), outcome));
    }

    /// Leaves the gate: with the head's outcome and time if the head came
    /// (`outcome` only overrides it when it is an error), else with
    /// `outcome` now.
    pub fn finish(mut self, outcome: Outcome) {
        self.leave(outcome);
    }

    fn leave(&mut self, outcome: Outcome) {
        let Some(entry) = self.entry.take() else {
            return;
        };
        let (at, outcome) = match (self.head, outcome) {
            (Some((at, head)), Outcome::Success) => (at, head),
            (Some((at, _)), other) => (at, other),
            (None, other) => (self.overload.now(), other),
        };
        self.state.gate.leave(entry, at, outcome);
        self.overload.left();
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.leave(Outcome::Cancelled);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_policy::Policy;

    fn policy(overload: &str) -> Policy {
        Policy::from_toml("t.toml", &format!("no_limits = true\n{overload}")).unwrap()
    }

    const GATE_OF_ONE: &str = "[overload]\ninitial_limit = 1\nmin_limit = 1\nmax_limit = 1\n";

    fn admit(o: &Arc<Overload>) -> Admit {
        o.try_admit(&Method::GET, "/", &HeaderMap::new(), &Extensions::new())
    }

    #[test]
    fn the_gate_follows_the_policy_in_force_across_reloads() {
        let engine = Arc::new(Engine::in_memory(policy(""), 100));
        let o = Arc::new(Overload::new(engine.clone()));
        assert!(matches!(admit(&o), Admit::Off));

        engine.replace_policy(policy(GATE_OF_ONE));
        let held = match admit(&o) {
            Admit::In(a) => a,
            _ => panic!("the gate is on once the policy has one"),
        };
        assert!(matches!(admit(&o), Admit::Shed { .. }), "one place, held");

        // Another policy with the same gate keeps its state: the place is
        // still held.
        engine.replace_policy(policy(&format!("{GATE_OF_ONE}max_waiting = 3\n")));
        assert!(matches!(admit(&o), Admit::Shed { .. }));
        assert_eq!(o.settings().max_waiting, 3);
        drop(held);
        assert!(matches!(admit(&o), Admit::In(_)));

        engine.replace_policy(policy(""));
        assert!(matches!(admit(&o), Admit::Off));
        assert!(o.snapshot().is_none());
    }
}
