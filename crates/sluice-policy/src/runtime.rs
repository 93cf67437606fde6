//! Plans assigned at run time, as the engine keeps them: by the client's
//! key id (the keyed hash of its key), so that the same map can mirror a
//! shared store that never sees raw keys.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, Guard};
use sluice_store::{KeyHasher, KeyId};

/// The runtime plans an engine decides with, swapped as a whole on every
/// change, with a flag that spares each decision the swap's load while
/// there are none (the usual case: one atomic load instead of
/// `arc-swap`'s).
#[derive(Debug)]
pub(crate) struct RuntimePlansCell {
    plans: ArcSwap<RuntimePlans>,
    /// Whether `plans` has any assignment; written only under `writer`,
    /// after `plans`, so that it never stays behind.
    any: AtomicBool,
    writer: Mutex<()>,
}

impl RuntimePlansCell {
    pub fn new(plans: RuntimePlans) -> Self {
        Self {
            any: AtomicBool::new(!plans.is_empty()),
            plans: ArcSwap::from_pointee(plans),
            writer: Mutex::new(()),
        }
    }

    /// The plans now, empty or not.
    pub fn load(&self) -> Guard<Arc<RuntimePlans>> {
        self.plans.load()
    }

    /// The plans now, or `None` when there are none.
    pub fn in_force(&self) -> Option<Guard<Arc<RuntimePlans>>> {
        if !self.any.load(Ordering::Acquire) {
            return None;
        }
        Some(self.plans.load()).filter(|p| !p.is_empty())
    }

    /// Replaces the plans with `change` of them.
    pub fn update(&self, change: impl FnMut(&Arc<RuntimePlans>) -> RuntimePlans) {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.plans.rcu(change);
        self.any
            .store(!self.plans.load().is_empty(), Ordering::Release);
    }
}

/// One runtime assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Assigned {
    /// The plan.
    pub plan: String,
    /// The raw client key, when this process knows it (assigned here, or
    /// loaded from `runtime_keys_file`): only for saving that file.
    pub key: Option<Arc<str>>,
}

/// Runtime plan assignments by key id. Replaced as a whole on every change
/// (it lives in an `ArcSwap`).
#[derive(Debug, Clone, Default)]
pub(crate) struct RuntimePlans {
    by_id: HashMap<KeyId, Assigned>,
}

impl RuntimePlans {
    /// Assignments by raw key (from `runtime_keys_file`).
    pub fn from_keys<'a>(
        entries: impl IntoIterator<Item = &'a (String, String)>,
        hasher: &KeyHasher,
    ) -> Self {
        let by_id = entries
            .into_iter()
            .map(|(key, plan)| {
                let assigned = Assigned {
                    plan: plan.clone(),
                    key: Some(key.as_str().into()),
                };
                (hasher.key_id(key), assigned)
            })
            .collect();
        Self { by_id }
    }

    /// Whether there is no assignment (then no key needs hashing).
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The plan assigned to a key id.
    pub fn plan(&self, id: KeyId) -> Option<&str> {
        self.by_id.get(&id).map(|a| a.plan.as_str())
    }

    /// A copy with `id` (raw key `key`) on `plan`.
    pub fn with(&self, id: KeyId, key: &str, plan: &str) -> Self {
        let mut next = self.clone();
        next.by_id.insert(
            id,
            Assigned {
                plan: plan.to_owned(),
                key: Some(key.into()),
            },
        );
        next
    }

    /// A copy without `id`'s assignment, and whether it had one.
    pub fn without(&self, id: KeyId) -> (Self, bool) {
        let mut next = self.clone();
        let had = next.by_id.remove(&id).is_some();
        (next, had)
    }

    /// The assignments whose raw key is known, by key.
    pub fn named(&self) -> BTreeMap<String, String> {
        self.by_id
            .values()
            .filter_map(|a| Some((a.key.as_deref()?.to_owned(), a.plan.clone())))
            .collect()
    }

    /// The assignments a shared store holds, replacing these; raw keys
    /// known here are kept for the ids that remain.
    pub fn mirrored(&self, remote: HashMap<KeyId, String>) -> Self {
        let by_id = remote
            .into_iter()
            .map(|(id, plan)| {
                let key = self.by_id.get(&id).and_then(|a| a.key.clone());
                (id, Assigned { plan, key })
            })
            .collect();
        Self { by_id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mirror_keeps_the_raw_keys_it_knows_and_nothing_else() {
        let h = KeyHasher::from_secret(b"t");
        let local = RuntimePlans::default()
            .with(h.key_id("alice"), "alice", "pro")
            .with(h.key_id("bob"), "bob", "pro");
        let carol = h.key_id("carol");
        let remote = HashMap::from([
            (h.key_id("alice"), "enterprise".to_owned()),
            (carol, "pro".to_owned()),
        ]);
        let m = local.mirrored(remote);
        assert_eq!(m.plan(h.key_id("alice")), Some("enterprise"));
        assert_eq!(m.plan(carol), Some("pro"));
        assert_eq!(m.plan(h.key_id("bob")), None, "removed remotely");
        assert_eq!(
            m.named(),
            BTreeMap::from([("alice".to_owned(), "enterprise".to_owned())]),
            "carol's raw key is not known here"
        );
    }

    #[test]
    fn the_cell_is_read_only_while_it_holds_assignments() {
        let h = KeyHasher::from_secret(b"t");
        let cell = RuntimePlansCell::new(RuntimePlans::default());
        assert!(cell.in_force().is_none());
        cell.update(|m| m.with(h.key_id("alice"), "alice", "pro"));
        let plans = cell.in_force().expect("an assignment is in force");
        assert_eq!(plans.plan(h.key_id("alice")), Some("pro"));
        cell.update(|m| m.without(h.key_id("alice")).0);
        assert!(cell.in_force().is_none());
        assert!(cell.load().is_empty());
        let loaded = RuntimePlansCell::new(RuntimePlans::from_keys(
            &[("bob".to_owned(), "pro".to_owned())],
            &h,
        ));
        assert!(loaded.in_force().is_some(), "assignments from a file count");
    }

    #[test]
    fn assignments_are_named_by_the_hasher_they_are_loaded_with() {
        // An engine is built with its final hasher (a shared store's, keyed
        // by the secret every instance shares): the keys file's
        // assignments are found under it, and under no other.
        let (a, b) = (KeyHasher::from_secret(b"a"), KeyHasher::from_secret(b"b"));
        let entries = [("alice".to_owned(), "pro".to_owned())];
        let plans = RuntimePlans::from_keys(&entries, &b);
        assert_eq!(plans.plan(b.key_id("alice")), Some("pro"));
        assert_eq!(plans.plan(a.key_id("alice")), None);
        let (none, had) = plans.without(b.key_id("alice"));
        assert!(had && none.is_empty());
    }
}
