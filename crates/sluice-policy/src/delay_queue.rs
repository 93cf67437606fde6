//! The requests an `on_limit = "delay"` limit holds now on this instance,
//! which `max_queue` bounds.
//!
//! On the memory store a decision locks the queue from start to end. On a
//! shared store the decision is a round trip that no lock may span: the
//! request first takes a place ([`DelayQueue::enter`]), which counts as
//! held until it is either turned into a release time
//! ([`Ticket::hold_until`]) or dropped (not delayed, refused, or
//! cancelled). So the bound stays exact on each instance, at the price of
//! counting a request being decided as held for the length of its round
//! trip.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use sluice_core::Nanos;

/// Release times, earliest first.
pub(crate) type Releases = BinaryHeap<Reverse<Nanos>>;

/// One delay limit's queue on this instance.
#[derive(Debug, Default)]
pub(crate) struct DelayQueue {
    releases: Mutex<Releases>,
    /// Places taken by requests being decided on the shared store.
    pending: AtomicUsize,
}

impl DelayQueue {
    /// Locks the queue and forgets the requests released by `now`.
    pub(crate) fn lock(&self, now: Nanos) -> MutexGuard<'_, Releases> {
        let mut q = self.releases.lock().unwrap_or_else(PoisonError::into_inner);
        while q.peek().is_some_and(|Reverse(t)| *t <= now) {
            q.pop();
        }
        q
    }

    /// How many places requests being decided hold now.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Takes a place for a request about to be decided on the shared
    /// store, if fewer than `max` are held or pending; otherwise the time
    /// until the earliest held request is released (0 when only pending
    /// ones fill it).
    pub(crate) fn enter(self: &Arc<Self>, now: Nanos, max: usize) -> Result<Ticket, Nanos> {
        let q = self.lock(now);
        if q.len() + self.pending() >= max {
            return Err(q.peek().map_or(0, |Reverse(t)| t.saturating_sub(now)));
        }
        // Taken under the lock, so that two requests cannot both take the
        // last place.
        self.pending.fetch_add(1, Ordering::AcqRel);
        drop(q);
        Ok(Ticket {
            queue: self.clone(),
        })
    }
}

/// A place in a [`DelayQueue`] for a request being decided; given back
/// when dropped.
#[derive(Debug)]
pub(crate) struct Ticket {
    queue: Arc<DelayQueue>,
}

impl Ticket {
    /// The request was admitted and is held until `release`: its place now
    /// counts until then.
    pub(crate) fn hold_until(self, release: Nanos) {
        self.queue.lock(0).push(Reverse(release));
        // `drop(self)` gives the pending place back.
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.queue.pending.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_bounded_and_given_back() {
        let q = Arc::new(DelayQueue::default());
        let a = q.enter(0, 2).ok();
        let b = q.enter(0, 2).ok();
        assert!(a.is_some() && b.is_some());
        assert_eq!(q.enter(0, 2).err(), Some(0), "two pending fill it");
        drop(a);
        assert_eq!(q.pending(), 1);
        let c = q.enter(0, 2).ok();
        assert!(c.is_some());
        if let Some(c) = c {
            c.hold_until(100);
        }
        assert_eq!(q.pending(), 1);
        assert_eq!(
            q.enter(10, 2).err(),
            Some(90),
            "a held request releases at 100"
        );
        drop(b);
        assert!(q.enter(100, 1).is_ok(), "released at 100, nothing pending");
    }
}
