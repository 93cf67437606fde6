//! Time, as the algorithms see it: a count of nanoseconds.
//!
//! The algorithms take `now` as an argument; they never read a clock
//! themselves. A [`Clock`] is what the stores and servers use to produce `now`.
//! [`SystemClock`] reads Unix time (so fixed windows align to wall-clock
//! multiples of their length); [`ManualClock`] is a clock that tests move by
//! hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Nanoseconds since an epoch. For [`SystemClock`] the epoch is the Unix epoch.
pub type Nanos = u64;

/// One second in nanoseconds.
pub const SECOND: Nanos = 1_000_000_000;

/// A source of the current time.
pub trait Clock: Send + Sync {
    /// The current time in nanoseconds.
    fn now(&self) -> Nanos;
}

/// The system clock: Unix time in nanoseconds, read cheaply.
///
/// It reads the wall clock once, when created, and from then on advances with
/// the CPU's time-stamp counter (through `quanta`, which falls back to the
/// OS's monotonic clock where the counter is unreliable). A read costs a few
/// nanoseconds instead of a system clock call, and an NTP step cannot move it.
/// Fixed windows thus align to wall-clock multiples of their length (to
/// within the wall clock's accuracy at start-up).
///
/// A time-stamp counter can disagree slightly between cores, so two reads on
/// different threads may go backwards. The algorithms tolerate that (time
/// stands still until the clock catches up), and the memory store keeps a
/// high-water mark per shard, so no decision is ever made at an earlier time
/// than one already made for the same key.
#[derive(Debug, Clone)]
pub struct SystemClock {
    unix_at_start: Nanos,
    clock: quanta::Clock,
    start: u64,
}

impl SystemClock {
    /// A clock anchored to the wall clock now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let start = clock.raw();
        let unix_at_start = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        Self {
            unix_at_start,
            clock,
            start,
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    #[inline]
    fn now(&self) -> Nanos {
        let elapsed = self.clock.delta_as_nanos(self.start, self.clock.raw());
        self.unix_at_start.saturating_add(elapsed)
    }
}

/// A clock moved by hand, for tests and simulations. Clones share the time.
///
/// ```
/// use sluice_core::{Clock, ManualClock};
/// let clock = ManualClock::new(5);
/// let other = clock.clone();
/// clock.advance(10);
/// assert_eq!(other.now(), 15);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    now: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock that starts at `start` nanoseconds.
    pub fn new(start: Nanos) -> Self {
        Self {
            now: Arc::new(AtomicU64::new(start)),
        }
    }

    /// Moves the clock forward by `by` nanoseconds.
    pub fn advance(&self, by: Nanos) {
        self.now.fetch_add(by, Ordering::SeqCst);
    }

    /// Sets the clock to `to`, which may be earlier than now.
    pub fn set(&self, to: Nanos) {
        self.now.store(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Nanos {
        (**self).now()
    }
}
