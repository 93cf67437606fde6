//! The fluid meter shared by the token and leaky buckets.
//!
//! A meter holds a level of used capacity that drains continuously at the
//! rate. Quantities are *scaled* so that all arithmetic is exact integers:
//! with the rate reduced to `a` units per `p` nanoseconds, one unit of cost
//! is `p` scaled units and the level drains `a` scaled units per nanosecond.
//!
//! A level above the capacity is debt ([`Algorithm::debit`]): every request
//! is refused until it has drained back to the capacity. Without debt the
//! level never passes the capacity, and nothing here changes.
//!
//! [`Algorithm::debit`]: crate::Algorithm::debit

use crate::algorithm::Debited;
use crate::clock::Nanos;
use crate::error::LimitError;
use crate::math::ceil_div;
use crate::rate::Rate;

/// The parameters of a meter in scaled units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meter {
    /// Scaled units drained per nanosecond.
    pub(crate) a: u64,
    /// Scaled units per unit of cost.
    pub(crate) p: u64,
    /// Capacity in scaled units: `burst * p`.
    pub(crate) cap: u64,
    /// Capacity in units of cost.
    pub(crate) burst: u64,
}

/// A meter's per-key state: the used level (scaled) as of `last`.
///
/// The default, level 0, is a full, idle bucket. A level above the capacity
/// (`burst * p`) is a key in debt.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct BucketState {
    /// Used capacity in scaled units.
    pub(crate) level: u64,
    /// The time the level was last brought up to date.
    pub(crate) last: Nanos,
}

impl BucketState {
    /// Used capacity in scaled units (see the module docs).
    pub fn level(&self) -> u64 {
        self.level
    }

    /// When the level was last brought up to date.
    pub fn last(&self) -> Nanos {
        self.last
    }
}

impl Meter {
    pub(crate) fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        if burst == 0 {
            return Err(LimitError::ZeroBurst);
        }
        let (a, p) = rate.reduced();
        let cap = burst.checked_mul(p).ok_or(LimitError::TooLong { burst })?;
        // Keep `cap / a` nanoseconds (the time to drain a full meter) well
        // inside u64 so that deadlines never overflow.
        if cap / a > (500 * 365 * 86_400) * crate::clock::SECOND {
            return Err(LimitError::TooLong { burst });
        }
        Ok(Self { a, p, cap, burst })
    }

    /// The level at `now`. A clock reading earlier than `last` is treated as
    /// `last`: time stands still rather than running backwards.
    #[inline]
    pub(crate) fn level_at(&self, s: &BucketState, now: Nanos) -> u64 {
        if now <= s.last {
            return s.level;
        }
        let drained = u128::from(now - s.last) * u128::from(self.a);
        u64::try_from(u128::from(s.level).saturating_sub(drained)).unwrap_or(0)
    }

    /// Nanoseconds for `level` scaled units to drain, rounded up.
    #[inline]
    pub(crate) fn drain_time(&self, level: u64) -> Nanos {
        ceil_div(u128::from(level), u128::from(self.a))
    }

    /// Whole units of cost still free at `level`.
    #[inline]
    pub(crate) fn free_units(&self, level: u64) -> u64 {
        (self.cap - level.min(self.cap)) / self.p
    }
}

impl Meter {
    /// Decides a request on the meter. With `queue` set, an admitted request
    /// reports the time the water ahead of it needs to drain as its delay
    /// (the leaky bucket without `nodelay`).
    #[inline]
    pub(crate) fn check(
        &self,
        s: &BucketState,
        now: Nanos,
        cost: u64,
        queue: bool,
    ) -> crate::algorithm::Outcome<BucketState> {
        use crate::algorithm::Outcome;
        use crate::decision::Decision;

        let level = self.level_at(s, now);
        // cost <= burst was checked by the caller, so this cannot overflow.
        let need = cost * self.p;
        if u128::from(level) + u128::from(need) <= u128::from(self.cap) {
            let new_level = level + need;
            let decision = Decision {
                allowed: true,
                limit: self.burst,
                remaining: self.free_units(new_level),
                reset_after: self.drain_time(new_level),
                retry_after: None,
                delay: if queue { self.drain_time(level) } else { 0 },
            };
            let update = (cost > 0).then_some(BucketState {
                level: new_level,
                last: now.max(s.last),
            });
            Outcome { decision, update }
        } else {
            // `level + need` may exceed u64 when the capacity is above half
            // of it (very long limits), so the excess is taken in u128.
            let excess = u128::from(level) + u128::from(need) - u128::from(self.cap);
            let decision = Decision {
                allowed: false,
                limit: self.burst,
                remaining: self.free_units(level),
                reset_after: self.drain_time(level),
                retry_after: Some(ceil_div(excess, u128::from(self.a))),
                delay: 0,
            };
            Outcome {
                decision,
                update: None,
            }
        }
    }

    /// Takes `amount` units of cost out of the meter at `now` (see
    /// [`Algorithm::refund`](crate::Algorithm::refund)), down to empty: a
    /// key in debt gets its debt back first.
    pub(crate) fn refund(&self, s: &mut BucketState, now: Nanos, amount: u64) {
        // Nothing given back changes nothing (not even the time of the
        // state, which a clock that steps back would then see).
        if amount == 0 {
            return;
        }
        // Not capped at the burst: a key in debt gets its debt back first.
        let take = u128::from(amount) * u128::from(self.p);
        let level = u128::from(self.level_at(s, now)).saturating_sub(take);
        *s = BucketState {
            // At most the level it was.
            level: level as u64,
            last: now.max(s.last),
        };
    }

    /// Charges `amount` units at `now` whatever is left (see
    /// [`Algorithm::debit`](crate::Algorithm::debit)): the level may rise
    /// past the capacity by `max_debt` units at most, and never past
    /// `u64::MAX`. Nothing charged changes nothing.
    pub(crate) fn debit(
        &self,
        s: &mut BucketState,
        now: Nanos,
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let level = self.level_at(s, now);
        let p = u128::from(self.p);
        let ceiling = (u128::from(self.cap).saturating_add(u128::from(max_debt) * p))
            .min(u128::from(u64::MAX));
        let room = ceiling.saturating_sub(u128::from(level)) / p;
        // At most `amount`, so it fits.
        let charged = room.min(u128::from(amount)) as u64;
        if charged > 0 {
            *s = BucketState {
                // level + charged * p <= ceiling <= u64::MAX.
                level: level + charged * self.p,
                last: now.max(s.last),
            };
        }
        Debited::of(amount, charged)
    }

    /// When the state is fully drained.
    #[inline]
    pub(crate) fn idle_at(&self, s: &BucketState) -> Nanos {
        s.last.saturating_add(self.drain_time(s.level))
    }
}
