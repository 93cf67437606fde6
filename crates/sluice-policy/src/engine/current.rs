//! The compiled policy in force, which every decision reads from start to
//! end, and a reload replaces.
//!
//! It sits in an [`ArcSwap`]. A decision on a store that answers at once
//! reads it through [`Current::with`]: each thread keeps the last snapshot
//! it read, with the stamp it was read under, and reads the swap again only
//! when the stamp has moved (a reload, or another engine decided on this
//! thread since). The usual decision then costs one plain load and a
//! compare, where a guarded load of the swap writes and clears a slot of
//! its own with two atomic read-modify-writes.
//!
//! A thread that stops deciding keeps its last snapshot (one per thread)
//! until it decides again or ends. So a limit a reload removes may live on
//! in such a copy for a while: [`Compiled::new`] never takes state from the
//! store for a limit the replaced policy did not have, or such a copy could
//! bring its old counts back.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::{ArcSwap, Guard};
use std::sync::Mutex;

use super::compiled::Compiled;

/// Stamps, unique in the process: every snapshot any engine installs gets
/// a new one, so a thread's copy is never taken for another engine's.
static STAMPS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's last snapshot and its stamp.
    static LAST: Cell<Option<(u64, Arc<Compiled>)>> = const { Cell::new(None) };
}

/// The compiled policy in force. See the module docs.
#[derive(Debug)]
pub(super) struct Current {
    swap: ArcSwap<Compiled>,
    /// The stamp of the snapshot in `swap`, written after it.
    stamp: AtomicU64,
    /// Held by whoever replaces the snapshot: its stamp is then always the
    /// latest snapshot's.
    writer: Mutex<()>,
}

impl Current {
    /// The first snapshot.
    pub(super) fn new(compiled: Compiled) -> Self {
        Self {
            swap: ArcSwap::from_pointee(compiled),
            stamp: AtomicU64::new(STAMPS.fetch_add(1, Ordering::Relaxed)),
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
        let stamp = STAMPS.fetch_add(1, Ordering::Relaxed);
        self.stamp.store(stamp, Ordering::Release);
    }

    /// Runs `f` on the snapshot through this thread's copy (see the module
    /// docs). The copy is taken out of its slot for the call and put back
    /// after: a decision within a decision (another engine's) finds the
    /// slot empty and reads its own.
    #[inline]
    pub(super) fn with<R>(&self, f: impl FnOnce(&Compiled) -> R) -> R {
        let stamp = self.stamp.load(Ordering::Acquire);
        let compiled = match LAST.try_with(Cell::take) {
            Ok(Some((s, compiled))) if s == stamp => compiled,
            _ => self.read(),
        };
        // Put back when `f` returns, so that its answer is made in place.
        let copy = Copy(std::mem::ManuallyDrop::new(Some((stamp, compiled))));
        f(copy.compiled())
    }

    /// The snapshot, read from the swap for this thread's copy: under the
    /// stamp read before it, so that a reload meanwhile only makes the next
    /// decision read again.
    #[cold]
    #[inline(never)]
    fn read(&self) -> Arc<Compiled> {
        self.swap.load_full()
    }
}

/// This thread's copy while a decision reads it: put back in its slot when
/// dropped (dropped, while the thread ends).
struct Copy(std::mem::ManuallyDrop<Option<(u64, Arc<Compiled>)>>);

impl Copy {
    #[inline(always)]
    fn compiled(&self) -> &Compiled {
        match &*self.0 {
            Some((_, compiled)) => compiled,
            // Taken only by `drop`.
            None => unreachable!("the copy is read before it is put back"),
        }
    }
}

impl Drop for Copy {
    #[inline(always)]
    fn drop(&mut self) {
        // Taken out: what is left (`None`) owns nothing and is not dropped.
        let copy = std::mem::take(&mut *self.0);
        let _ = LAST.try_with(|last| {
            // The slot is empty, but after a decision within this one.
            if let Some(other) = last.replace(copy) {
                super::verdict::drop_out_of_line(other);
            }
        });
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
    /// reads its own policy; every copy is put back or dropped, none lost.
    #[test]
    fn decisions_within_decisions_read_their_own_policy() {
        let (a, b) = (current("a"), current("b"));
        let held = a.load_full();
        let before = Arc::strong_count(&held);
        for _ in 0..3 {
            let inner = a.with(|outer| {
                assert_eq!(name(outer), "a");
                let within = b.with(|c| {
                    assert_eq!(name(c), "b");
                    a.with(name)
                });
                (name(outer), within)
            });
            assert_eq!(inner, ("a".into(), "a".into()));
        }
        // This thread keeps one copy, of one of the two engines' policies.
        let after = Arc::strong_count(&held);
        assert!(after <= before + 1, "{before} to {after}: a copy leaked");
    }
}
