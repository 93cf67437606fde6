//! The compiled policy in force: swapped whole on reload, and read by each
//! decision through its thread's copy.
//!
//! An [`ArcSwap`] load costs two atomic read-modify-writes (taking a debt
//! slot and paying it back), a good part of a decision on the memory
//! store. A reload is rare and a decision is not, so each thread keeps the
//! compiled policy it last used, with the version it had; a decision reads
//! the version (a plain load) and uses its thread's copy while it matches.
//! A reload stores the new policy, then raises the version: a decision that
//! reads the raised version reloads the copy, and one that read it before
//! decides on the policy it was started under, as any concurrent decision
//! may.
//!
//! The cost is memory: a thread's copy keeps the policy it last used (and
//! the counters of limits a reload dropped) until that thread decides again
//! or exits. One copy per thread, whatever the engines.

// The `Rc` around an `Arc` is the point: a thread shares its copy by a
// count that is not atomic.
#![allow(clippy::redundant_allocation)]

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::{ArcSwap, Guard};

use super::compiled::Compiled;

/// Every `Current` gets its own id: a thread's copy names the one it came
/// from, and an engine dropped and another made at the same address never
/// share one.
static IDS: AtomicU64 = AtomicU64::new(1);

/// The compiled policy in force, and its version.
#[derive(Debug)]
pub(super) struct Current {
    cell: ArcSwap<Compiled>,
    /// Raised after every store.
    version: AtomicU64,
    id: u64,
}

/// A thread's copy of one `Current`'s policy.
struct Copy {
    id: u64,
    version: u64,
    compiled: Option<Rc<Arc<Compiled>>>,
}

thread_local! {
    static COPY: RefCell<Copy> = const {
        RefCell::new(Copy { id: 0, version: 0, compiled: None })
    };
}

impl Current {
    pub(super) fn new(compiled: Compiled) -> Self {
        Self {
            cell: ArcSwap::from_pointee(compiled),
            version: AtomicU64::new(0),
            id: IDS.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The policy in force, guarded (for a use that does not outlive the
    /// caller).
    pub(super) fn load(&self) -> Guard<Arc<Compiled>> {
        self.cell.load()
    }

    /// The policy in force, owned (for a decision that may wait).
    pub(super) fn load_full(&self) -> Arc<Compiled> {
        self.cell.load_full()
    }

    /// Puts `compiled` in force: the next decisions on every thread see it.
    pub(super) fn store(&self, compiled: Arc<Compiled>) {
        self.cell.store(compiled);
        self.version.fetch_add(1, Ordering::Release);
    }

    /// The policy in force, through this thread's copy: an `Rc`, whose
    /// count is not atomic (for a use on this thread that does not wait).
    #[inline]
    pub(super) fn snapshot(&self) -> Rc<Arc<Compiled>> {
        let version = self.version.load(Ordering::Acquire);
        let copied = COPY.try_with(|copy| {
            let mut copy = copy.borrow_mut();
            if copy.id != self.id || copy.version != version {
                self.refresh(&mut copy, version);
            }
            copy.compiled.clone()
        });
        match copied {
            Ok(Some(compiled)) => compiled,
            // The thread is exiting: the shared one.
            _ => Rc::new(self.cell.load_full()),
        }
    }

    #[cold]
    #[inline(never)]
    fn refresh(&self, copy: &mut Copy, version: u64) {
        // Loaded after the version was read: it is at least that version's
        // policy (a store is followed by its raise). If newer, the next
        // decision loads it again.
        copy.compiled = Some(Rc::new(self.cell.load_full()));
        copy.id = self.id;
        copy.version = version;
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use sluice_store::MemoryStore;

    use super::{Compiled, Current};
    use crate::Policy;

    fn compiled(name: &str) -> Compiled {
        let toml = format!("[[limits]]\nname = \"{name}\"\nkey = \"ip\"\nrate = \"1/s\"\n");
        let store = MemoryStore::new(Default::default());
        let hasher = sluice_store::KeyHasher::random();
        Compiled::new(
            Policy::from_toml("c.toml", &toml).unwrap(),
            &store,
            &hasher,
            None,
        )
    }

    fn name(c: &Current) -> String {
        c.snapshot().policy.limits()[0].limit.name.to_string()
    }

    #[test]
    fn a_thread_sees_each_store_on_its_next_read() {
        let (a, b) = (Current::new(compiled("a1")), Current::new(compiled("b1")));
        // Two cells read in turn on one thread: each its own policy.
        assert_eq!(
            (name(&a), name(&b), name(&a)),
            ("a1".into(), "b1".into(), "a1".into())
        );
        a.store(Arc::new(compiled("a2")));
        assert_eq!(name(&a), "a2");
        // Another thread, with no copy yet, and after a store there.
        std::thread::scope(|s| {
            s.spawn(|| {
                assert_eq!(name(&a), "a2");
                a.store(Arc::new(compiled("a3")));
            });
        });
        assert_eq!(name(&a), "a3");
        assert_eq!(name(&b), "b1");
    }
}
