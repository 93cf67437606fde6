//! A circuit breaker in front of the store.
//!
//! ```text
//!            N failures in a row                open_for elapsed
//!  Closed ─────────────────────────▶ Open ─────────────────────────▶ HalfOpen
//!    ▲                                 ▲        (one probe call)          │
//!    │            probe succeeds       │        probe fails               │
//!    └─────────────────────────────────┼──────────────────────────────────┤
//!                                      └──────────────────────────────────┘
//! ```
//!
//! While it is open, calls are not made at all (the fallback decides at
//! once), and every `open_for` one call is let through as a probe. So a dead
//! store costs one failed call per `open_for`, not one per request, and a
//! recovered store is back in use within `open_for` plus one round trip.
//! While the probe is out, other callers are told to [wait](Admit::Wait)
//! for its outcome (the caller bounds the wait) rather than fall back: the
//! store is likely back, and what a fallback admits is only charged to it
//! later. The state is three atomics: the closed path is one relaxed load.

use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use sluice_store::seam::BreakerState;

/// What the caller should do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Call the store.
    Call,
    /// Call the store as the one probe; report the result.
    Probe,
    /// Do not call the store; use the fallback.
    Skip,
    /// A probe is out: wait for its outcome, then ask again.
    Wait,
}

/// A state change worth one log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The breaker opened: the fallback takes over.
    Opened,
    /// The breaker closed: the store is back.
    Closed,
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// A circuit breaker. See the module docs.
#[derive(Debug)]
pub struct Breaker {
    state: AtomicU8,
    failures: AtomicU32,
    /// When an open breaker lets its next probe through, in nanoseconds
    /// since `epoch`.
    reopen_at: AtomicU64,
    threshold: u32,
    open_for: Duration,
    epoch: Instant,
}

impl Breaker {
    /// A closed breaker that opens after `threshold` failures in a row (at
    /// least 1) and probes every `open_for`.
    pub fn new(threshold: u32, open_for: Duration) -> Self {
        Self {
            state: AtomicU8::new(CLOSED),
            failures: AtomicU32::new(0),
            reopen_at: AtomicU64::new(0),
            threshold: threshold.max(1),
            open_for,
            epoch: Instant::now(),
        }
    }

    /// A breaker that starts open, probing at once: for a store that has not
    /// connected yet.
    pub fn new_open(threshold: u32, open_for: Duration) -> Self {
        let b = Self::new(threshold, open_for);
        b.state.store(OPEN, Ordering::Release);
        b
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// The state now.
    pub fn state(&self) -> BreakerState {
        match self.state.load(Ordering::Acquire) {
            CLOSED => BreakerState::Closed,
            OPEN => BreakerState::Open,
            _ => BreakerState::HalfOpen,
        }
    }

    /// Whether to call the store.
    pub fn admit(&self) -> Admit {
        match self.state.load(Ordering::Acquire) {
            CLOSED => Admit::Call,
            OPEN if self.now() >= self.reopen_at.load(Ordering::Acquire) => {
                // Exactly one caller wins the probe.
                match self.state.compare_exchange(
                    OPEN,
                    HALF_OPEN,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => Admit::Probe,
                    Err(_) => Admit::Wait,
                }
            }
            HALF_OPEN => Admit::Wait,
            _ => Admit::Skip,
        }
    }

    /// Reports a successful call. Returns `Closed` when this closed the
    /// breaker.
    pub fn success(&self) -> Option<Transition> {
        self.failures.store(0, Ordering::Relaxed);
        if self.state.load(Ordering::Acquire) == CLOSED {
            return None;
        }
        (self.state.swap(CLOSED, Ordering::AcqRel) != CLOSED).then_some(Transition::Closed)
    }

    /// Reports a failed call (an error or a timeout). Returns `Opened` when
    /// this opened the breaker.
    pub fn failure(&self) -> Option<Transition> {
        match self.state.load(Ordering::Acquire) {
            HALF_OPEN => {
                // The probe failed: stay open for another round. Not a new
                // transition: the outage was already reported.
                self.trip();
                None
            }
            CLOSED => {
                let n = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= self.threshold
                    && self
                        .state
                        .compare_exchange(CLOSED, HALF_OPEN, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    self.trip();
                    return Some(Transition::Opened);
                }
                None
            }
            _ => None,
        }
    }

    /// Gives the probe back when its caller went away before the store
    /// answered (a dropped request): the breaker is open again, due at
    /// once, so the next caller probes. Without this, a probe dropped
    /// half-way would leave the breaker half-open, every caller waiting for
    /// a probe that never reports.
    pub fn abandon_probe(&self) {
        let _ = self
            .state
            .compare_exchange(HALF_OPEN, OPEN, Ordering::AcqRel, Ordering::Acquire);
    }

    fn trip(&self) {
        self.reopen_at.store(
            self.now()
                .saturating_add(u64::try_from(self.open_for.as_nanos()).unwrap_or(u64::MAX)),
            Ordering::Release,
        );
        self.state.store(OPEN, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_failures_in_a_row() {
        let b = Breaker::new(3, Duration::from_secs(3600));
        assert_eq!(b.failure(), None);
        assert_eq!(b.failure(), None);
        assert_eq!(b.success(), None, "a success resets the count");
        assert_eq!(b.failure(), None);
        assert_eq!(b.failure(), None);
        assert_eq!(b.admit(), Admit::Call);
        assert_eq!(b.failure(), Some(Transition::Opened));
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(), Admit::Skip, "open: no calls until open_for");
        assert_eq!(b.failure(), None, "reported once");
    }

    #[test]
    fn probes_once_then_closes_on_success() {
        let b = Breaker::new(1, Duration::ZERO);
        assert_eq!(b.failure(), Some(Transition::Opened));
        assert_eq!(b.admit(), Admit::Probe);
        assert_eq!(b.state(), BreakerState::HalfOpen);
        assert_eq!(
            b.admit(),
            Admit::Wait,
            "one probe at a time: the others wait for its outcome"
        );
        assert_eq!(b.success(), Some(Transition::Closed));
        assert_eq!(b.admit(), Admit::Call);
    }

    #[test]
    fn an_abandoned_probe_lets_the_next_caller_probe() {
        let b = Breaker::new_open(1, Duration::ZERO);
        assert_eq!(b.admit(), Admit::Probe);
        assert_eq!(b.admit(), Admit::Wait, "one probe at a time");
        b.abandon_probe();
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(), Admit::Probe, "the next caller probes");
        // Giving back a probe that is not out changes nothing.
        assert_eq!(b.success(), Some(Transition::Closed));
        b.abandon_probe();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn a_failed_probe_reopens_without_a_new_transition() {
        let b = Breaker::new(1, Duration::ZERO);
        b.failure();
        assert_eq!(b.admit(), Admit::Probe);
        assert_eq!(b.failure(), None);
        assert_eq!(b.state(), BreakerState::Open);
        assert_eq!(b.admit(), Admit::Probe, "open_for is zero: probe again");
    }

    #[test]
    fn starts_open_for_a_store_not_yet_connected() {
        let b = Breaker::new_open(5, Duration::ZERO);
        assert_eq!(b.admit(), Admit::Probe);
        assert_eq!(b.success(), Some(Transition::Closed));
    }
}
