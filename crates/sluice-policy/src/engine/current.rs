//! The compiled policy in force, which every decision reads from start to
//! end, and a reload replaces.
//!
//! It sits in an [`ArcSwap`]: a decision reads it with a guarded load,
//! and a reload stores the next one. A copy kept per thread, read under a
//! stamp, once saved the guarded load's two atomic read-modify-writes; it
//! earned nothing measurable through the tower layer and was removed
//! (docs/benchmarks.md).

use std::sync::Arc;
use std::sync::Mutex;

use arc_swap::{ArcSwap, Guard};

use super::compiled::Compiled;

/// The compiled policy in force. See the module docs.
#[derive(Debug)]
pub(super) struct Current {
    swap: ArcSwap<Compiled>,
    /// Held by whoever replaces the snapshot, so that two reloads at once
    /// each build on the other's.
    writer: Mutex<()>,
}

impl Current {
    /// The first snapshot.
    pub(super) fn new(compiled: Compiled) -> Self {
        Self {
            swap: ArcSwap::from_pointee(compiled),
            writer: Mutex::new(()),
        }
    }

    /// The snapshot, for a caller that does not outlive its call.
    pub(super) fn load(&self) -> Guard<Arc<Compiled>> {
        self.swap.load()
    }

    /// The snapshot, owned: for a caller that may wait.
    pub(super) fn load_full(&self) -> Arc<Compiled> {
        self.swap.load_full()
    }

    /// Replaces the snapshot by what `next` makes of the one in force.
    pub(super) fn replace(&self, next: impl FnOnce(&Compiled) -> Compiled) {
        let _writer = self
            .writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let compiled = next(&self.swap.load());
        self.swap.store(Arc::new(compiled));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use sluice_store::{KeyHasher, MemoryStore};

    use super::{Compiled, Current};
    use crate::Policy;

    fn current(name: &str) -> Current {
        let toml = format!("[[limits]]\nname = \"{name}\"\nkey = \"ip\"\nrate = \"1/s\"\n");
        let policy = Policy::from_toml("current.toml", &toml).unwrap();
        let store = MemoryStore::new(Default::default());
        Current::new(Compiled::new(policy, &store, &KeyHasher::random(), None))
    }

    fn name(c: &Compiled) -> String {
        c.policy.limits()[0].limit.name.to_string()
    }

    /// A decision within a decision, on another engine and on the same one,
    /// reads its own policy, and keeps no copy of it.
    #[test]
    fn decisions_within_decisions_read_their_own_policy() {
        let (a, b) = (current("a"), current("b"));
        let held = a.load_full();
        let before = Arc::strong_count(&held);
        for _ in 0..3 {
            let outer = a.load();
            assert_eq!(name(&outer), "a");
            let within = {
                let c = b.load();
                assert_eq!(name(&c), "b");
                name(&a.load())
            };
            let inner = (name(&outer), within);
            assert_eq!(inner, ("a".into(), "a".into()));
        }
        let after = Arc::strong_count(&held);
        assert_eq!(after, before, "no copy is kept");
    }
}
