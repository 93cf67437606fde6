//! A policy compiled against a store: its limits' counters and gates,
//! swapped as one on reload.

use std::sync::Arc;

use sluice_store::KeyHasher;
use sluice_store::seam::{Counter, CounterDef, Store};

use crate::delay_queue::DelayQueue;
use crate::policy::Policy;

/// A policy and its limits' state in the store, swapped as one.
#[derive(Debug)]
pub(super) struct Compiled {
    pub(super) policy: Arc<Policy>,
    /// The store's counter of each of the policy's limits, by index.
    pub(super) counters: Vec<Counter>,
    /// The delay queue of each `on_limit = "delay"` limit, by index: the
    /// requests it holds on this instance, which `max_queue` bounds.
    pub(super) gates: Vec<Option<Arc<DelayQueue>>>,
    /// The policy's limits, when every request meets them alike
    /// ([`alike`](super::alike)).
    pub(super) alike: Option<super::alike::Alike>,
}

impl Compiled {
    /// Registers a policy's limits with `store`; the counters and delay
    /// queues of limits whose identity is unchanged from `old` carry over
    /// with their counts and the requests they hold. The others start
    /// fresh, even if a copy of an earlier policy still holds them
    /// ([`current`](super::current)).
    pub(super) fn new(
        policy: Policy,
        store: &dyn Store,
        hasher: &KeyHasher,
        old: Option<&Compiled>,
    ) -> Self {
        let counters = policy
            .limits()
            .iter()
            .map(|def| counter(store, def.limit.counter(), old))
            .collect();
        let gates = policy
            .limits()
            .iter()
            .map(|def| {
                def.limit.delay?;
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
            alike: super::alike::Alike::of(&policy, hasher),
            policy: Arc::new(policy),
            counters,
            gates,
        }
    }
}

/// The counter of limit `def`: `old`'s own if it has one of it; else new,
/// on a reload, or the store's, for a first policy (which shares the
/// state of engines on the same store).
fn counter(store: &dyn Store, def: &CounterDef, old: Option<&Compiled>) -> Counter {
    let Some(old) = old else {
        return store.counter(def.clone());
    };
    match old.counters.iter().find(|c| c.def() == def) {
        Some(kept) => kept.clone(),
        None => store.fresh_counter(def.clone()),
    }
}
