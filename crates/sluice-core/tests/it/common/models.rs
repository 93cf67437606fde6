//! Reference models: the six algorithms written straight from their
//! definitions, for clarity rather than speed.
//!
//! A model only answers two questions, "how many whole units of cost are
//! free at time `now`?" ([`Model::free`]) and "is the key in debt?"
//! ([`Model::in_debt`]), and records admitted requests ([`Model::admit`]),
//! refunds and debits. A request of cost `c` passes iff the key is not in
//! debt and `c <= free(now)` ([`fits`]). Everything else in a [`Decision`]
//! is derived from those by [`decide`], from the *definitions* of the
//! fields:
//!
//! * `remaining`: `free(now)` after the request (if admitted) is recorded;
//! * `reset_after`: the first whole nanosecond `d` at which `free(now + d)`
//!   equals the burst again, found by searching, not by a formula;
//! * `retry_after`: the first whole nanosecond `d` at which the same cost
//!   fits, again found by searching;
//! * `delay` (leaky bucket without `nodelay`): the first whole nanosecond at
//!   which the water that was in the bucket *before* this request has leaked
//!   out.
//!
//! Searching over whole nanoseconds gives the exact real-valued time rounded
//! up, because every model's "fits" condition, once true, stays true while no
//! request arrives. No model rounds anything: quantities are integers over a
//! fixed denominator.
//!
//! Debt ([`Model::debit`]): what is left is charged first, then debt down to
//! `max_debt` units below empty; the rest is the excess, returned. The
//! window models are in `window_models.rs`.
//!
//! The models require the clock never to run backwards (they assert it); the
//! tests that step the clock back compare the engine with itself instead.

use std::fmt::Debug;

use sluice_core::Decision;

use super::Params;

/// A reference model of one algorithm for one key.
pub trait Model: Clone + Debug {
    /// The limit's parameters.
    fn params(&self) -> Params;

    /// Whole units of cost that could pass at `now`.
    fn free(&self, now: u64) -> u64;

    /// Records an admitted request of `cost > 0` at `now`.
    fn admit(&mut self, now: u64, cost: u64);

    /// Whether the key is in debt at `now`: more is charged than the limit
    /// holds, so nothing passes, not even a peek.
    fn in_debt(&self, now: u64) -> bool;

    /// Gives back `amount` of admitted cost at `now`, from where the
    /// algorithm's definition says it comes back (see
    /// `sluice_core::Algorithm::refund`), never beyond full.
    fn refund(&mut self, now: u64, amount: u64);

    /// Charges `amount` at `now` whatever is left: what is free first, then
    /// debt, at most `max_debt` units of it. Returns the excess, the part
    /// not charged.
    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64;

    /// Whether admitted requests are held for the water ahead of them to
    /// drain (the leaky bucket without `nodelay`).
    fn queues(&self) -> bool {
        false
    }
}

/// The smallest `d` such that `ready(now + d)` holds, searched first within
/// `horizon`, then within twice that, and so on (a debt can take many
/// windows to pay off).
///
/// `ready` must be monotone (once true, true for every later time).
pub fn earliest(now: u64, horizon: u64, ready: impl Fn(u64) -> bool) -> u64 {
    if ready(now) {
        return 0;
    }
    let mut hi = horizon.max(1);
    while !ready(now + hi) {
        assert!(hi < u64::MAX - now, "model never ready after {now}");
        hi = hi.saturating_mul(2).min(u64::MAX - now);
    }
    // Invariant: not ready at now + lo, ready at now + hi.
    let mut lo = 0;
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ready(now + mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    hi
}

/// A bound on how long any model without debt takes to become fully
/// replenished: the sliding window counter needs up to two windows.
pub fn horizon(p: Params) -> u64 {
    2 * p.window_ceil() + 2
}

/// Whether a request of `cost` passes at `at`.
pub fn fits<M: Model>(model: &M, at: u64, cost: u64) -> bool {
    !model.in_debt(at) && cost <= model.free(at)
}

/// The decision the model takes for `cost` at `now` (cost at most the burst),
/// without recording anything.
pub fn decide<M: Model>(model: &M, now: u64, cost: u64) -> Decision {
    let p = model.params();
    let b = p.burst;
    assert!(cost <= b, "the model only decides possible costs");
    let h = horizon(p);
    let free = model.free(now);
    if fits(model, now, cost) {
        let mut after = model.clone();
        if cost > 0 {
            after.admit(now, cost);
        }
        Decision {
            allowed: true,
            limit: b,
            remaining: after.free(now),
            reset_after: earliest(now, h, |t| after.free(t) == b),
            retry_after: None,
            delay: if model.queues() {
                earliest(now, h, |t| model.free(t) == b)
            } else {
                0
            },
        }
    } else {
        Decision {
            allowed: false,
            limit: b,
            remaining: free,
            reset_after: earliest(now, h, |t| model.free(t) == b),
            retry_after: Some(earliest(now, h, |t| fits(model, t, cost))),
            delay: 0,
        }
    }
}

/// Token bucket: `burst` tokens, refilled continuously at the rate, never
/// above `burst`; in debt, fewer than none.
///
/// Tokens are kept as the exact fraction `ticks / period`: one token is
/// `period` ticks and `amount` ticks flow in every nanosecond. GCRA must make
/// the same decisions, so this is its model too.
#[derive(Debug, Clone)]
pub struct TokenBucketModel {
    p: Params,
    ticks: i128,
    at: u64,
}

impl TokenBucketModel {
    /// A full bucket.
    pub fn new(p: Params) -> Self {
        Self {
            p,
            ticks: Self::full(p),
            at: 0,
        }
    }

    fn full(p: Params) -> i128 {
        i128::from(p.burst) * i128::from(p.period)
    }

    /// Tokens (in ticks) at `now`: negative in debt.
    fn ticks_at(&self, now: u64) -> i128 {
        assert!(now >= self.at, "the model's clock never runs backwards");
        let inflow = i128::from(now - self.at) * i128::from(self.p.amount);
        (self.ticks + inflow).min(Self::full(self.p))
    }
}

impl Model for TokenBucketModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let whole = self.ticks_at(now).max(0) / i128::from(self.p.period);
        u64::try_from(whole).expect("at most burst")
    }

    fn in_debt(&self, now: u64) -> bool {
        self.ticks_at(now) < 0
    }

    fn admit(&mut self, now: u64, cost: u64) {
        let take = i128::from(cost) * i128::from(self.p.period);
        let ticks = self.ticks_at(now);
        assert!(ticks >= take, "admitted more tokens than the bucket held");
        self.ticks = ticks - take;
        self.at = now;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        let back = i128::from(amount) * i128::from(self.p.period);
        self.ticks = (self.ticks_at(now) + back).min(Self::full(self.p));
        self.at = now;
    }

    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64 {
        let period = i128::from(self.p.period);
        // Tokens may go down to -max_debt.
        let can_take = (self.ticks_at(now) + i128::from(max_debt) * period).max(0) / period;
        let charged = i128::from(amount).min(can_take);
        self.ticks = self.ticks_at(now) - charged * period;
        self.at = now;
        amount - u64::try_from(charged).expect("at most amount")
    }
}

/// Leaky bucket: admitted cost pours water into a bucket of `burst` that
/// leaks at the rate; a request that would overflow it is refused. A debit
/// may overflow it: that is debt.
///
/// Water is kept as the exact fraction `ticks / period`; `amount` ticks leak
/// out every nanosecond.
#[derive(Debug, Clone)]
pub struct LeakyBucketModel {
    p: Params,
    nodelay: bool,
    ticks: u128,
    at: u64,
}

impl LeakyBucketModel {
    /// An empty bucket.
    pub fn new(p: Params, nodelay: bool) -> Self {
        Self {
            p,
            nodelay,
            ticks: 0,
            at: 0,
        }
    }

    /// Water (in ticks) at `now`.
    fn ticks_at(&self, now: u64) -> u128 {
        assert!(now >= self.at, "the model's clock never runs backwards");
        let leaked = u128::from(now - self.at) * u128::from(self.p.amount);
        self.ticks.saturating_sub(leaked)
    }

    fn capacity(&self) -> u128 {
        u128::from(self.p.burst) * u128::from(self.p.period)
    }
}

impl Model for LeakyBucketModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let room = self.capacity().saturating_sub(self.ticks_at(now));
        u64::try_from(room / u128::from(self.p.period)).expect("at most burst")
    }

    fn in_debt(&self, now: u64) -> bool {
        self.ticks_at(now) > self.capacity()
    }

    fn admit(&mut self, now: u64, cost: u64) {
        self.ticks = self.ticks_at(now) + u128::from(cost) * u128::from(self.p.period);
        assert!(self.ticks <= self.capacity(), "the bucket overflowed");
        self.at = now;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        let back = u128::from(amount) * u128::from(self.p.period);
        self.ticks = self.ticks_at(now).saturating_sub(back);
        self.at = now;
    }

    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64 {
        let period = u128::from(self.p.period);
        // The water may rise to max_debt units above the brim.
        let brim = self.capacity() + u128::from(max_debt) * period;
        let can_pour = brim.saturating_sub(self.ticks_at(now)) / period;
        let charged = u128::from(amount).min(can_pour);
        self.ticks = self.ticks_at(now) + charged * period;
        self.at = now;
        amount - u64::try_from(charged).expect("at most amount")
    }

    fn queues(&self) -> bool {
        !self.nodelay
    }
}

pub use super::window_models::{FixedWindowModel, SlidingLogModel, SlidingWindowModel};
