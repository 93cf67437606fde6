//! Reference models of the three window algorithms (see `models.rs` for
//! what a model is), with debt carried the way `docs/algorithms.md` states
//! it, or, when `forgive` is set, forgiven at the window's end:
//!
//! * fixed window: a window's count above the burst moves on to the next
//!   window, one burst less per boundary;
//! * sliding window counter: likewise; a window weighs on the next one as
//!   its previous count with at most one burst;
//! * sliding log: debt is units not logged yet; while there is some, each
//!   unit that leaves the window is logged again as it leaves.

use std::collections::BTreeMap;

use super::Params;
use super::models::Model;

/// What is left of `count`, counted in window `from`, in window `to`:
/// each boundary crossed takes one burst off it (or all of it, with debt
/// forgiven). Walked one window at a time, which ends once nothing is left.
fn carry(p: Params, forgive: bool, mut count: u64, from: u64, to: u64) -> u64 {
    let mut window = from;
    while window < to && count > 0 {
        count = if forgive {
            0
        } else {
            count.saturating_sub(p.burst)
        };
        window += 1;
    }
    count
}

/// The count of window `i` in `counts` (window -> its count, as of the last
/// time the window was touched): its own, or what an earlier window carries
/// into it.
fn count_of(p: Params, forgive: bool, counts: &BTreeMap<u64, u64>, i: u64) -> u64 {
    counts
        .range(..=i)
        .next_back()
        .map_or(0, |(&w, &n)| carry(p, forgive, n, w, i))
}

/// Fixed window: a count per aligned window
/// `floor(now * amount / (burst * period))`; a request fits if the count
/// plus its cost is at most `burst`.
#[derive(Debug, Clone)]
pub struct FixedWindowModel {
    p: Params,
    forgive: bool,
    counts: BTreeMap<u64, u64>,
}

impl FixedWindowModel {
    /// No window counted yet; debt carried.
    pub fn new(p: Params) -> Self {
        Self::with_forgive(p, false)
    }

    /// No window counted yet; debt forgiven at the window's end if
    /// `forgive`.
    pub fn with_forgive(p: Params, forgive: bool) -> Self {
        Self {
            p,
            forgive,
            counts: BTreeMap::new(),
        }
    }

    fn count_at(&self, now: u64) -> u64 {
        count_of(self.p, self.forgive, &self.counts, self.p.window_of(now))
    }
}

impl Model for FixedWindowModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        self.p.burst.saturating_sub(self.count_at(now))
    }

    fn in_debt(&self, now: u64) -> bool {
        self.count_at(now) > self.p.burst
    }

    fn admit(&mut self, now: u64, cost: u64) {
        let count = self.count_at(now) + cost;
        self.counts.insert(self.p.window_of(now), count);
    }

    fn refund(&mut self, now: u64, amount: u64) {
        // Only the current window's count: an earlier one is over.
        let count = self.count_at(now);
        if count > 0 {
            let count = count.saturating_sub(amount);
            self.counts.insert(self.p.window_of(now), count);
        }
    }

    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64 {
        let count = self.count_at(now);
        let charged = amount.min((self.p.burst.saturating_add(max_debt)).saturating_sub(count));
        if charged > 0 {
            self.counts.insert(self.p.window_of(now), count + charged);
        }
        amount - charged
    }
}

/// Sliding log: how many units were logged at each nanosecond; a unit
/// weighs while it is in the window `(now - W, now]`,
/// `W = burst * period / amount`, that is until `ceil(W)` ns after it was
/// logged. A request fits if the units in the window plus its cost are at
/// most `burst` and there is no debt.
///
/// Debt is units charged but not logged yet: while there is some, every
/// unit that leaves the window is logged again at the nanosecond it leaves
/// (the first at which a unit fits), and the debt falls by one.
#[derive(Debug, Clone)]
pub struct SlidingLogModel {
    p: Params,
    forgive: bool,
    units: BTreeMap<u64, u64>,
    debt: u64,
}

impl SlidingLogModel {
    /// An empty log; debt logged as units leave the window.
    pub fn new(p: Params) -> Self {
        Self::with_forgive(p, false)
    }

    /// An empty log; debt dropped when the first unit leaves the window if
    /// `forgive`.
    pub fn with_forgive(p: Params, forgive: bool) -> Self {
        Self {
            p,
            forgive,
            units: BTreeMap::new(),
            debt: 0,
        }
    }

    /// Whether a unit logged at `at` is in the window at `now`.
    fn in_window(&self, at: u64, now: u64) -> bool {
        at <= now
            && u128::from(now - at) * u128::from(self.p.amount)
                < u128::from(self.p.burst) * u128::from(self.p.period)
    }

    /// How many times units leave the window by `t`, logged again each time
    /// (a unit logged at `a` leaves at `a + ceil(W)`, `a + 2 ceil(W)`, ...).
    fn departures(&self, t: u64) -> u128 {
        let w = self.p.window_ceil();
        (self.units.iter())
            .filter(|&(&a, _)| t >= a + w)
            .map(|(&a, &n)| u128::from(n) * u128::from((t - a) / w))
            .sum()
    }

    /// The log and the debt at `now`, the debt logged as units left.
    fn settled(&self, now: u64) -> Self {
        let mut log = self.clone();
        let departed = self.departures(now);
        if self.debt == 0 || departed == 0 {
            return log;
        }
        if self.forgive {
            log.debt = 0;
            return log;
        }
        let w = self.p.window_ceil();
        // Each unit is logged again as often as it left by `until`.
        let moved = |until: u64| -> BTreeMap<u64, u64> {
            let mut units = BTreeMap::new();
            for (&a, &n) in &self.units {
                let times = if until >= a { (until - a) / w } else { 0 };
                *units.entry(a + times * w).or_default() += n;
            }
            units
        };
        if departed <= u128::from(self.debt) {
            log.units = moved(now);
            log.debt -= u64::try_from(departed).expect("at most the debt");
            return log;
        }
        // The debt runs out at the first time `end` by which as many units
        // left: some of those leaving at `end` are logged again.
        let (mut lo, mut hi) = (0, now);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.departures(mid) >= u128::from(self.debt) {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        let end = hi;
        let mut again = self.debt - u64::try_from(self.departures(end - 1)).expect("below");
        log.units = BTreeMap::new();
        for (at, n) in moved(end - 1) {
            if at + w == end {
                let logged = n.min(again);
                again -= logged;
                *log.units.entry(end).or_default() += logged;
                *log.units.entry(at).or_default() += n - logged;
            } else {
                *log.units.entry(at).or_default() += n;
            }
        }
        log.debt = 0;
        log
    }

    fn used(&self, now: u64) -> u64 {
        let in_window = self
            .units
            .iter()
            .filter(|&(&at, _)| self.in_window(at, now));
        in_window.map(|(_, &n)| n).sum::<u64>() + self.debt
    }

    /// Brings the log up to `now` and forgets the units out of the window
    /// (the clock never runs backwards here, so they are out for good).
    fn settle(&mut self, now: u64) {
        *self = self.settled(now);
        let p = self.p;
        self.units.retain(|&at, &mut n| {
            n > 0
                && u128::from(now - at) * u128::from(p.amount)
                    < u128::from(p.burst) * u128::from(p.period)
        });
    }
}

impl Model for SlidingLogModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        self.p.burst.saturating_sub(self.settled(now).used(now))
    }

    fn in_debt(&self, now: u64) -> bool {
        self.settled(now).debt > 0
    }

    fn admit(&mut self, now: u64, cost: u64) {
        self.settle(now);
        *self.units.entry(now).or_default() += cost;
    }

    fn refund(&mut self, now: u64, amount: u64) {
        *self = self.settled(now);
        // The debt first (not logged yet), then the newest units.
        let from_debt = amount.min(self.debt);
        self.debt -= from_debt;
        let mut left = amount - from_debt;
        while left > 0 {
            let Some(mut newest) = self.units.last_entry() else {
                break;
            };
            let taken = left.min(*newest.get());
            *newest.get_mut() -= taken;
            left -= taken;
            if *newest.get() == 0 {
                newest.remove();
            }
        }
    }

    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64 {
        self.settle(now);
        let used = self.used(now);
        let charged = amount.min((self.p.burst.saturating_add(max_debt)).saturating_sub(used));
        let logged = charged.min(self.p.burst.saturating_sub(used));
        if logged > 0 {
            *self.units.entry(now).or_default() += logged;
        }
        self.debt += charged - logged;
        amount - charged
    }
}

/// Sliding-window counter: a count per aligned window; the estimate at
/// `now` is `previous * (1 - f) + current`, where `f` is the fraction of
/// the current window elapsed, `current` the current window's count and
/// `previous` the previous window's, at most one burst of it (the rest
/// carried into the current one). A request fits if the estimate plus its
/// cost is at most `burst`.
#[derive(Debug, Clone)]
pub struct SlidingWindowModel {
    p: Params,
    forgive: bool,
    counts: BTreeMap<u64, u64>,
}

impl SlidingWindowModel {
    /// No window counted yet; debt carried.
    pub fn new(p: Params) -> Self {
        Self::with_forgive(p, false)
    }

    /// No window counted yet; debt forgiven at the window's end if
    /// `forgive`.
    pub fn with_forgive(p: Params, forgive: bool) -> Self {
        Self {
            p,
            forgive,
            counts: BTreeMap::new(),
        }
    }

    fn count(&self, window: Option<u64>) -> u64 {
        window.map_or(0, |i| count_of(self.p, self.forgive, &self.counts, i))
    }

    /// The estimate times the window's length, in units of 1/amount ns
    /// (where a window is `burst * period` long), and that length.
    fn estimate_x_len(&self, now: u64) -> (u128, u128) {
        let len = u128::from(self.p.burst) * u128::from(self.p.period);
        let t = u128::from(now) * u128::from(self.p.amount);
        let index = self.p.window_of(now);
        let elapsed = t - u128::from(index) * len;
        let previous = self.count(index.checked_sub(1)).min(self.p.burst);
        let current = self.count(Some(index));
        let estimate = u128::from(previous) * (len - elapsed) + u128::from(current) * len;
        (estimate, len)
    }
}

impl Model for SlidingWindowModel {
    fn params(&self) -> Params {
        self.p
    }

    fn free(&self, now: u64) -> u64 {
        let (estimate, len) = self.estimate_x_len(now);
        let capacity = u128::from(self.p.burst) * len;
        u64::try_from(capacity.saturating_sub(estimate) / len).expect("at most burst")
    }

    fn in_debt(&self, now: u64) -> bool {
        let (estimate, len) = self.estimate_x_len(now);
        estimate > u128::from(self.p.burst) * len
    }

    fn admit(&mut self, now: u64, cost: u64) {
        let index = self.p.window_of(now);
        let count = self.count(Some(index)) + cost;
        self.counts.insert(index, count);
    }

    fn refund(&mut self, now: u64, amount: u64) {
        // The latest window that admitted anything, while it still weighs
        // on the estimate: it is the current window or the one before, or
        // it carries debt into the one before.
        let index = self.p.window_of(now);
        let before = self.count(index.checked_sub(1));
        if let Some((&w, count)) = self.counts.iter_mut().next_back()
            && (w + 1 >= index || before > 0)
        {
            *count = count.saturating_sub(amount);
        }
    }

    fn debit(&mut self, now: u64, amount: u64, max_debt: u64) -> u64 {
        // The estimate may reach burst + max_debt.
        let (estimate, len) = self.estimate_x_len(now);
        let ceiling = u128::from(self.p.burst.saturating_add(max_debt)) * len;
        let room = u64::try_from(ceiling.saturating_sub(estimate) / len).unwrap_or(u64::MAX);
        let charged = amount.min(room);
        if charged > 0 {
            let index = self.p.window_of(now);
            let count = self.count(Some(index)) + charged;
            self.counts.insert(index, count);
        }
        amount - charged
    }
}
