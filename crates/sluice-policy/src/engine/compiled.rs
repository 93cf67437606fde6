//! A policy compiled against a store: its limits' counters and gates,
//! swapped as one on reload.

use std::collections::HashSet;
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
    /// Whether a limit settles its cost after the response: a decision
    /// then keeps a reservation, which only
    /// [`decide_reserving`](super::Engine::decide_reserving) returns.
    pub(super) settles: bool,
    /// The identities of limits an earlier policy of this engine had and a
    /// later one dropped (at most [`RETIRED`]): one brought back starts
    /// fresh.
    retired: HashSet<Arc<str>>,
}

/// The most retired identities remembered. Past it the set starts again:
/// a limit brought back after that many others were dropped may find its
/// old counts, and only while a thread still holds a copy of a policy
/// that had it.
const RETIRED: usize = 4096;

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
        let retired = retired(&policy, old);
        let counters: Vec<Counter> = policy
            .limits()
            .iter()
            .map(|def| counter(store, def.limit.counter(), old, &retired))
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
            settles: policy.settles(),
            policy: Arc::new(policy),
            counters,
            gates,
            retired,
        }
    }
}

/// The identities retired once `policy` replaces `old`: `old`'s, and those
/// of its limits `policy` drops (a limit brought back is taken out when it
/// is registered anew, below).
fn retired(policy: &Policy, old: Option<&Compiled>) -> HashSet<Arc<str>> {
    let Some(old) = old else {
        return HashSet::new();
    };
    let mut retired = if old.retired.len() >= RETIRED {
        HashSet::new()
    } else {
        old.retired.clone()
    };
    let kept: HashSet<&str> = policy
        .limits()
        .iter()
        .map(|d| d.limit.counter().id())
        .collect();
    for c in &old.counters {
        if !kept.contains(c.def().id()) {
            retired.insert(c.def().id().into());
        }
    }
    for id in kept {
        retired.remove(id);
    }
    retired
}

/// The counter of limit `def`: `old`'s own if it has one of it; else new if
/// an earlier policy of this engine had it (a thread may still hold that
/// policy: its counts must not come back), or the store's (which shares
/// the state of engines on the same store).
fn counter(
    store: &dyn Store,
    def: &CounterDef,
    old: Option<&Compiled>,
    retired: &HashSet<Arc<str>>,
) -> Counter {
    if let Some(kept) = old.and_then(|o| o.counters.iter().find(|c| c.def() == def)) {
        return kept.clone();
    }
    let earlier = old.is_some_and(|o| {
        o.retired.contains(def.id()) || o.counters.iter().any(|c| c.def().id() == def.id())
    });
    if earlier || retired.contains(def.id()) {
        store.fresh_counter(def.clone())
    } else {
        store.counter(def.clone())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sluice_store::{KeyHasher, Limit, MemoryStore};

    use super::Compiled;
    use crate::Policy;

    /// A reload that keeps a limit keeps its counter: the same state.
    #[test]
    fn a_reload_that_keeps_a_limit_keeps_its_counter() {
        let toml = "[[limits]]\nname = \"all\"\nkey = \"global\"\nrate = \"10/s\"\n\
                    [[limits]]\nname = \"ip\"\nkey = \"ip\"\nrate = \"10/s\"\n";
        let policy = Policy::from_toml("kept.toml", toml).unwrap();
        let (store, hasher) = (MemoryStore::new(Default::default()), KeyHasher::random());
        let compiled = Compiled::new(policy, &store, &hasher, None);
        let again = Policy::from_toml("kept.toml", toml).unwrap();
        let next = Compiled::new(again, &store, &hasher, Some(&compiled));
        assert!(std::ptr::eq(
            next.counters[0].slot().get::<Limit>().unwrap(),
            compiled.counters[0].slot().get::<Limit>().unwrap()
        ));
    }
}
