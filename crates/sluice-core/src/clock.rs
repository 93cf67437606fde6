//! Time, as the algorithms see it: a count of nanoseconds.
//!
//! The algorithms take `now` as an argument; they never read a clock
//! themselves. A [`Clock`] is what the stores and servers use to produce `now`.
//! [`SystemClock`] reads Unix time (so fixed windows align to wall-clock
//! multiples of their length); [`ManualClock`] is a clock that tests move by
//! hand.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
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
/// The process reads the wall clock once, when its first `SystemClock` is
/// made, and from then on every `SystemClock` advances from that reading
/// with the CPU's time-stamp counter (through `quanta`, which falls back
/// to the OS's monotonic clock where the counter is unreliable). A read
/// costs a few nanoseconds instead of a system clock call, and an NTP step
/// cannot move it. Fixed windows thus align to wall-clock multiples of
/// their length (to within the wall clock's accuracy at start-up).
///
/// Time never goes back within a thread: a read returns the latest time
/// this thread has read if the counter is behind it (a thread moved to a
/// core whose counter is a little behind). Reads on different threads may
/// still disagree by that much. The algorithms tolerate a time earlier than
/// their state's (time stands still until the clock catches up): a
/// decision at an earlier reading can only refuse more, never admit more.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    anchor: &'static Anchor,
}

/// Where every [`SystemClock`] of the process counts from.
#[derive(Debug)]
struct Anchor {
    unix_at_start: Nanos,
    clock: quanta::Clock,
    start: u64,
}

static ANCHOR: OnceLock<Anchor> = OnceLock::new();

thread_local! {
    /// The latest time this thread has read from a [`SystemClock`].
    static LATEST: Cell<Nanos> = const { Cell::new(0) };
}

impl SystemClock {
    /// The process's clock (anchored to the wall clock by the first call).
    pub fn new() -> Self {
        let anchor = ANCHOR.get_or_init(|| {
            let clock = quanta::Clock::new();
            let start = clock.raw();
            let unix_at_start = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
                .unwrap_or(0);
            Anchor {
                unix_at_start,
                clock,
                start,
            }
        });
        Self { anchor }
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
        let a = self.anchor;
        let read = a
            .unix_at_start
            .saturating_add(a.clock.delta_as_nanos(a.start, a.clock.raw()));
        LATEST.with(|latest| never_back(latest, read))
    }
}

/// `read`, or the latest time returned before if that is later; which it
/// then records.
#[inline]
fn never_back(latest: &Cell<Nanos>, read: Nanos) -> Nanos {
    let now = read.max(latest.get());
    latest.set(now);
    now
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

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the counter reads, one thread's times never go back,
        /// and a reading ahead of every earlier one is returned as read.
        #[test]
        fn a_thread_s_times_never_go_back(reads in proptest::collection::vec(0u64..1_000, 1..50)) {
            let latest = Cell::new(0);
            let mut before = 0;
            for read in reads {
                let now = never_back(&latest, read);
                proptest::prop_assert!(now >= before && now >= read);
                proptest::prop_assert_eq!(now, read.max(before));
                before = now;
            }
        }
    }

    #[test]
    fn every_system_clock_reads_one_time() {
        // One anchor for the process: the thread's latest reading, which
        // every clock shares, is then one time, not two clocks' mixed.
        let (a, b) = (SystemClock::new(), SystemClock::new());
        assert!(std::ptr::eq(a.anchor, b.anchor));
        let (x, y, z) = (a.now(), b.now(), a.now());
        assert!(x <= y && y <= z, "{x} {y} {z}");
    }
}
