//! `on_limit = "delay"` on a concurrency limit: a request that finds every
//! slot held waits for one, up to `max_delay`, instead of a 429 at once.
//!
//! A rate limit's delay is known when the request is decided (the time its
//! cost will have been replenished); a slot's is not: it comes back when a
//! request in flight ends. So a waiting request is decided again, charging
//! nothing until it is admitted:
//! - at once when a slot of the limit is given back on this instance
//!   (`SlotWait::released`, called by the settlement that gives it back);
//! - and every [`POLL`] at the latest, for slots given back by another
//!   instance on a shared store or whose lease ran out, which this
//!   instance cannot see.
//!
//! At most `max_queue` requests wait on one limit on one instance; one
//! that finds the queue full is refused at once, as is one still refused
//! at its deadline. Waiters are woken together and race for the slot: the
//! order among them is not first come, first served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluice_core::Nanos;
use tokio::sync::Notify;

/// How often a waiting request is decided again when no release on this
/// instance wakes it.
pub const POLL: Duration = Duration::from_millis(50);

/// The waiting room of one concurrency limit on this instance.
#[derive(Debug)]
pub struct SlotWait {
    /// The longest a request waits for a slot, in nanoseconds.
    pub max_wait: Nanos,
    /// The most requests waiting at once.
    pub max_queue: usize,
    waiting: AtomicUsize,
    released: Notify,
}

/// Two waiting rooms are alike when their settings are.
impl PartialEq for SlotWait {
    fn eq(&self, other: &Self) -> bool {
        (self.max_wait, self.max_queue) == (other.max_wait, other.max_queue)
    }
}

impl Eq for SlotWait {}

impl SlotWait {
    /// A room where requests wait up to `max_wait`, at most `max_queue` of
    /// them.
    pub fn new(max_wait: Nanos, max_queue: usize) -> Self {
        Self {
            max_wait,
            max_queue,
            waiting: AtomicUsize::new(0),
            released: Notify::new(),
        }
    }

    /// How many requests wait now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// A place in the room, or `None` when it is full.
    pub(crate) fn enter(&self) -> Option<Place<'_>> {
        let taken = self
            .waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_queue).then_some(n + 1)
            });
        taken.ok().map(|_| Place { room: self })
    }

    /// A slot of the limit was given back on this instance: every waiting
    /// request is decided again.
    pub(crate) fn released(&self) {
        self.released.notify_waiters();
    }
}

/// A request's place in a [`SlotWait`], given up when dropped.
#[derive(Debug)]
pub(crate) struct Place<'a> {
    room: &'a SlotWait,
}

impl Place<'_> {
    /// A wake-up registered now, so that a release between this call and
    /// the await is not missed.
    pub(crate) fn next_release(&self) -> std::pin::Pin<Box<tokio::sync::futures::Notified<'_>>> {
        let mut notified = Box::pin(self.room.released.notified());
        notified.as_mut().enable();
        notified
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        self.room.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_room_is_bounded_and_places_are_given_back() {
        let room = SlotWait::new(1_000, 2);
        let a = room.enter().unwrap();
        let b = room.enter().unwrap();
        assert!(room.enter().is_none(), "full");
        assert_eq!(room.waiting(), 2);
        drop(a);
        let c = room.enter();
        assert!(c.is_some());
        drop((b, c));
        assert_eq!(room.waiting(), 0);
    }

    #[tokio::test]
    async fn a_release_wakes_a_registered_waiter() {
        let room = SlotWait::new(1_000, 1);
        let place = room.enter().unwrap();
        let woken = place.next_release();
        room.released();
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .expect("woken by the release made after registering");
    }
}
