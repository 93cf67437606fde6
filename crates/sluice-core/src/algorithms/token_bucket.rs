//! Token bucket: a bucket of `burst` tokens, refilled continuously at the rate.
//!
//! A request of cost `n` takes `n` tokens if the bucket holds at least `n`,
//! and is refused otherwise (taking nothing). From idle, `burst` units pass
//! at once; after that, the rate.

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
use crate::algorithms::bucket::{BucketState, Meter};
use crate::clock::Nanos;
use crate::error::{CheckError, LimitError};
use crate::rate::Rate;

/// A token bucket with capacity `burst`, refilled at `rate`.
///
/// ```
/// use sluice_core::{Algorithm, Rate, TokenBucket};
/// let tb = TokenBucket::new(Rate::per_second(10), 20).unwrap();
/// let mut state = Default::default();
/// let d = tb.check_and_apply(&mut state, 0, 5).unwrap();
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 15);
/// // 5 tokens at 10/s take half a second to come back.
/// assert_eq!(d.reset_after, 500_000_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenBucket {
    meter: Meter,
}

impl TokenBucket {
    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        (self.meter.a, self.meter.p)
    }

    /// A bucket of `burst` tokens refilled at `rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        Ok(Self {
            meter: Meter::new(rate, burst)?,
        })
    }
}

impl Algorithm for TokenBucket {
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
        Ok(self.meter.check(state, now, cost, false))
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
