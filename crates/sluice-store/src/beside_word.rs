//! A pair of checks, one of them of a key kept apart on a word of its own
//! ([`one_key`](crate::one_key)): a global cap beside a per-client limit,
//! decided all or nothing without holding the word.

use sluice_core::{CheckError, Clock, Decision};

use crate::limit::AnyTable;
use crate::memory::{MemoryStore, Slotted, settle};
use crate::one_key::{ONE, OneKeyTable};

/// How many times a pair beside a kept-apart key's word reads and decides
/// before it holds the word instead (`MemoryStore::pair_beside_word`).
const BESIDE_TRIES: usize = 8;

impl<C: Clock> MemoryStore<C> {
    /// [`pair`](Self::pair) when one check is of a key kept apart on a word
    /// of its own ([`one_key`](crate::one_key)) and the other is not: the
    /// other's shard held, the word read without holding it and committed
    /// last, with a compare-and-swap (the checks of the key go on
    /// meanwhile; a moved word is read and decided again, the other shard
    /// unchanged under its lock). Both are decided at one time, no earlier
    /// than the word's latest time read after each load. `None`, nothing
    /// changed, for any other pair, while the word is held, or after
    /// [`BESIDE_TRIES`] reads that each found the word moved by the time
    /// of the commit: the caller then holds both, in order.
    #[inline(never)]
    pub(crate) fn pair_beside_word(
        &self,
        a: Slotted<'_, '_>,
        b: Slotted<'_, '_>,
    ) -> Result<Option<(bool, Decision, Decision)>, CheckError> {
        fn word_of<'l>((c, s): Slotted<'_, 'l>) -> Option<&'l OneKeyTable> {
            match &c.limit.table {
                AnyTable::OneKey(t) if s.1 == ONE => Some(t),
                _ => None,
            }
        }
        let (table, word, (other, slot), word_first) = match (word_of(a), word_of(b)) {
            (Some(t), None) => (t, a.0, b, true),
            (None, Some(t)) => (t, b.0, a, false),
            _ => return Ok(None),
        };
        let fast = table.fast();
        let mut guard = other.limit.table.lock(slot.1);
        let mut now = self.clock().now().max(guard.high());
        // Checks of the key that keep moving the word send the pair, after
        // a few tries, to the path that holds it: the wait is bounded.
        for _ in 0..BESIDE_TRIES {
            let Some(current) = table.peek_word() else {
                return Ok(None);
            };
            now = table.advance(now);
            guard.advance(now);
            let raw = fast.decide(current, now, word.cost)?;
            let outcome = guard.peek(other.key, now, other.cost)?;
            let allowed = raw.allowed() && outcome.decision.allowed;
            if allowed && word.cost > 0 && !table.commit_word(current, raw.tat(now)) {
                continue;
            }
            let on_word = if raw.allowed() && !allowed {
                // Admitted by the word, refused by the other: the word as
                // it stands, uncharged.
                fast.decision(fast.decide(current, now, 0)?)
            } else {
                fast.decision(raw)
            };
            let on_other = settle(&mut guard, other, outcome, allowed, now)?;
            return Ok(Some(if word_first {
                (allowed, on_word, on_other)
            } else {
                (allowed, on_other, on_word)
            }));
        }
        Ok(None)
    }
}
