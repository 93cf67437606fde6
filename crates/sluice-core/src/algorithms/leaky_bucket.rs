//! Leaky bucket with nginx `limit_req` semantics.
//!
//! Each admitted request pours its cost into a bucket of `burst` that leaks at
//! the rate. A request that would overflow the bucket is refused. An admitted
//! request is *delayed* by the time the water ahead of it needs to leak out,
//! which smooths a burst into the rate; with `nodelay` it passes at once and
//! only the accounting remains.
//!
//! Sluice's `burst` counts every request the bucket holds, so from idle
//! exactly `burst` requests are admitted at once. nginx's `burst=N` queues N
//! requests *behind* the one being served, admitting N + 1: nginx `burst=N`
//! corresponds to Sluice `burst = N + 1`.

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
use crate::algorithms::bucket::{BucketState, Meter};
use crate::clock::Nanos;
use crate::error::{CheckError, LimitError};
use crate::rate::Rate;

/// A leaky bucket of `burst`, leaking at `rate`.
///
/// ```
/// use sluice_core::{Algorithm, LeakyBucket, Rate};
/// let lb = LeakyBucket::new(Rate::per_second(2), 3, false).unwrap();
/// let mut s = Default::default();
/// let delays: Vec<_> = (0..4)
///     .map(|_| lb.check_and_apply(&mut s, 0, 1).unwrap())
///     .map(|d| d.allowed.then_some(d.delay))
///     .collect();
/// // Three are queued half a second apart; the fourth overflows.
/// assert_eq!(delays, [Some(0), Some(500_000_000), Some(1_000_000_000), None]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakyBucket {
    meter: Meter,
    nodelay: bool,
}

impl LeakyBucket {
    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        (self.meter.a, self.meter.p)
    }

    /// A bucket of `burst` leaking at `rate`; `nodelay` admits without delay.
    pub fn new(rate: Rate, burst: u64, nodelay: bool) -> Result<Self, LimitError> {
        Ok(Self {
            meter: Meter::new(rate, burst)?,
            nodelay,
        })
    }

    /// Whether admitted requests pass without delay.
    pub fn nodelay(&self) -> bool {
        self.nodelay
    }
}

impl Algorithm for LeakyBucket {
    type State = BucketState;
    type Update = BucketState;

    fn capacity(&self) -> u64 {
        self.meter.burst
    }

    #[inline]
    fn check(
        &self,
        state: &BucketState,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<BucketState>, CheckError> {
        ensure_possible(cost, self.meter.burst)?;
        Ok(self.meter.check(state, now, cost, !self.nodelay))
    }

    #[inline]
    fn apply(&self, state: &mut BucketState, update: BucketState) {
        *state = update;
    }

    fn refund(&self, state: &mut BucketState, now: Nanos, amount: u64) {
        self.meter.refund(state, now, amount);
    }

    fn debit(&self, state: &mut BucketState, now: Nanos, amount: u64, max_debt: u64) -> Debited {
        self.meter.debit(state, now, amount, max_debt)
    }

    fn idle_at(&self, state: &BucketState) -> Nanos {
        self.meter.idle_at(state)
    }
}
