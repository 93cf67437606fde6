//! Reference models: the six algorithms written straight from their
//! definitions, for clarity rather than speed.
//!
//! A model only answers one question, "how many whole units of cost are free
//! at time `now`?" ([`Model::free`]), and records admitted requests
//! ([`Model::admit`]). A request of cost `c` passes iff `c <= free(now)`.
//! Everything else in a [`Decision`] is derived from those two by
//! [`decide`], from the *definitions* of the fields:
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
//! The models require the clock never to run backwards (they assert it); the
//! tests that step the clock back compare the engine with itself instead.

use std::collections::BTreeMap;
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

    /// Gives back `amount` of admitted cost at `now`, from where the
    /// algorithm's definition says it comes back (see
    /// `sluice_core::Algorithm::refund`), never beyond full.
    fn refund(&mut self, now: u64, amount: u64);

    /// Whether admitted requests are held for the water ahead of them to
    /// drain (the leaky bucket without `nodelay`).
    fn queues(&self) -> bool {
        false
    }
}

/// The smallest `d` in `0..=horizon` such that `ready(now + d)` holds.
///
/// `ready` must be monotone (once true, true for every later time); the
/// search checks that it holds at the horizon.
pub fn earliest(now: u64, horizon: u64, ready: impl Fn(u64) -> bool) -> u64 {
    assert!(
        ready(now + horizon),
        "model not ready within {horizon} ns of {now}"
    );
    if ready(now) {
        return 0;
    }
    // Invariant: not ready at now + lo, ready at now + hi.
    let (mut lo, mut hi) = (0, horizon);
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

/// A bound on how long any model takes to become fully replenished: the
/// sliding window counter needs up to two windows.
pub fn horizon(p: Params) -> u64 {
    2 * p.window_ceil() + 2
}

/// The decision the model takes for `cost` at `now` (cost at most the burst),
/// without recording anything.
pub fn decide<M: Model>(model: &M, now: u64, cost: u64) -> Decision {
    let p = model.params();
    let b = p.burst;
    assert!(cost <= b, "the model only decides possible costs");
    let h = horizon(p);
    let free = model.free(now);
    if cost <= free {
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
            retry_after: Some(earliest(now, h, |t| cost <= model.free(t))),
            delay: 0,
        }
    }
}

/// Token bucket: `burst` tokens, refilled continuously at the rate, never
/// above `burst`.
///
/// Tokens are kept as the exact fraction `ticks / period`: one token is
/// `period` ticks and `amount` ticks flow in every nanosecond. GCRA must make
/// the same decisions, so this is its model too.
#[derive(Debug, Clone)]
pub struct TokenBucketModel {
    p: Params,
    ticks: u128,
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

    fn full(p: Params) -> u128 {
        u128::from(p.burst) * u128::from(p.period)
    }

    /// Tokens (in ticks) at `now`.
    fn ticks_at(&self, now: u64) -> u128 {
        assert!(now >= self.at, "the model's clock never runs backwards");
        let inflow = u128::from(now - self.at) * u128::from(self.p.amount);
        (self.ticks + inflow).min(Self::full(self.p))
    }
}

impl Model for TokenBucketModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let whole = self.ticks_at(now) / u128::from(self.p.period);
        u64::try_from(whole).expect("at most burst")
    }

    fn admit(&mut self, now: u64, cost: u64) {
        let take = u128::from(cost) * u128::from(self.p.period);
        let ticks = self.ticks_at(now);
        assert!(ticks >= take, "admitted more tokens than the bucket held");
        self.ticks = ticks - take;
        self.at = now;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        let back = u128::from(amount) * u128::from(self.p.period);
        self.ticks = (self.ticks_at(now) + back).min(Self::full(self.p));
        self.at = now;
    }
}

/// Leaky bucket: admitted cost pours water into a bucket of `burst` that
/// leaks at the rate; a request that would overflow it is refused.
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
}

impl Model for LeakyBucketModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let capacity = u128::from(self.p.burst) * u128::from(self.p.period);
        let room = capacity - self.ticks_at(now);
        u64::try_from(room / u128::from(self.p.period)).expect("at most burst")
    }

    fn admit(&mut self, now: u64, cost: u64) {
        self.ticks = self.ticks_at(now) + u128::from(cost) * u128::from(self.p.period);
        assert!(
            self.ticks <= u128::from(self.p.burst) * u128::from(self.p.period),
            "the bucket overflowed"
        );
        self.at = now;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        let back = u128::from(amount) * u128::from(self.p.period);
        self.ticks = self.ticks_at(now).saturating_sub(back);
        self.at = now;
    }

    fn queues(&self) -> bool {
        !self.nodelay
    }
}

/// Fixed window: a count per aligned window
/// `floor(now * amount / (burst * period))`, at most `burst` each.
#[derive(Debug, Clone)]
pub struct FixedWindowModel {
    p: Params,
    counts: BTreeMap<u64, u64>,
}

impl FixedWindowModel {
    /// No window counted yet.
    pub fn new(p: Params) -> Self {
        Self {
            p,
            counts: BTreeMap::new(),
        }
    }
}

impl Model for FixedWindowModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let used = self
            .counts
            .get(&self.p.window_of(now))
            .copied()
            .unwrap_or(0);
        self.p.burst - used
    }

    fn admit(&mut self, now: u64, cost: u64) {
        *self.counts.entry(self.p.window_of(now)).or_default() += cost;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        // Only the current window's count: an earlier one is over.
        if let Some(count) = self.counts.get_mut(&self.p.window_of(now)) {
            *count = count.saturating_sub(amount);
        }
    }
}

/// Sliding log: every admitted unit's timestamp; at most `burst` of them in
/// any window `(now - W, now]`, `W = burst * period / amount`.
#[derive(Debug, Clone)]
pub struct SlidingLogModel {
    p: Params,
    units: Vec<u64>,
}

impl SlidingLogModel {
    /// An empty log.
    pub fn new(p: Params) -> Self {
        Self {
            p,
            units: Vec::new(),
        }
    }

    /// Whether a unit logged at `at` is in `(now - W, now]`, i.e.
    /// `0 <= now - at < W`, compared as `(now - at) * amount < burst * period`.
    fn in_window(&self, at: u64, now: u64) -> bool {
        at <= now
            && u128::from(now - at) * u128::from(self.p.amount)
                < u128::from(self.p.burst) * u128::from(self.p.period)
    }
}

impl Model for SlidingLogModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        if let Some(&newest) = self.units.last() {
            assert!(now >= newest, "the model's clock never runs backwards");
        }
        let live = self.units.iter().filter(|&&at| self.in_window(at, now));
        self.p.burst - live.count() as u64
    }

    fn admit(&mut self, now: u64, cost: u64) {
        // The clock never runs backwards here, so a unit out of the window now
        // is out of it for good: dropping it only keeps the model fast.
        self.units.retain(|&at| {
            u128::from(now - at) * u128::from(self.p.amount)
                < u128::from(self.p.burst) * u128::from(self.p.period)
        });
        self.units.extend(std::iter::repeat_n(now, cost as usize));
    }

    fn refund(&mut self, _now: u64, amount: u64) {
        // The newest units.
        let keep = self.units.len().saturating_sub(amount as usize);
        self.units.truncate(keep);
    }
}

/// Sliding-window counter: per-window totals; the estimate at `now` is
/// `previous * (1 - f) + current`, where `f` is the fraction of the current
/// aligned window elapsed, and a request fits if the estimate plus its cost
/// is at most `burst`.
#[derive(Debug, Clone)]
pub struct SlidingWindowModel {
    p: Params,
    totals: BTreeMap<u64, u64>,
}

impl SlidingWindowModel {
    /// No window counted yet.
    pub fn new(p: Params) -> Self {
        Self {
            p,
            totals: BTreeMap::new(),
        }
    }

    fn total(&self, window: Option<u64>) -> u128 {
        window
            .and_then(|w| self.totals.get(&w))
            .map_or(0, |&n| u128::from(n))
    }
}

impl Model for SlidingWindowModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        // Work in units of 1/amount ns, where a window is `burst * period`
        // long: estimate * len = previous * (len - elapsed) + current * len.
        let len = u128::from(self.p.burst) * u128::from(self.p.period);
        let t = u128::from(now) * u128::from(self.p.amount);
        let index = self.p.window_of(now);
        let elapsed = t - u128::from(index) * len;
        let previous = self.total(index.checked_sub(1));
        let current = self.total(Some(index));
        let estimate_x_len = previous * (len - elapsed) + current * len;
        let capacity_x_len = u128::from(self.p.burst) * len;
        assert!(estimate_x_len <= capacity_x_len, "estimate above the burst");
        u64::try_from((capacity_x_len - estimate_x_len) / len).expect("at most burst")
    }

    fn admit(&mut self, now: u64, cost: u64) {
        *self.totals.entry(self.p.window_of(now)).or_default() += cost;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        // The latest window that admitted anything, while it still weighs
        // on the estimate (the current window or the one before).
        let index = self.p.window_of(now);
        if let Some((&w, total)) = self.totals.iter_mut().next_back()
            && w + 1 >= index
        {
            *total = total.saturating_sub(amount);
        }
    }
}
