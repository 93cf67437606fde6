//! Sliding-window counter: two fixed-window counts, the previous one weighted
//! by how much of it the sliding window still overlaps.
//!
//! With windows of length `W = burst / rate` and `e` the time elapsed in the
//! current window, the estimated use is
//! `previous * (W - e) / W + current`. A request of cost `n` passes if the
//! estimate plus `n` is at most `burst`. The comparison is done exactly, in
//! integers, without ever rounding the estimate.
//!
//! Debt ([`Algorithm::debit`]) is a current count above `burst`. At each
//! window boundary one burst of it stays with the window that ends (and is
//! weighed as the previous count) and the rest carries into the next window
//! as its current count: the estimate runs on continuously and falls at the
//! rate. With [`SlidingWindow::with_debt_forgiven`] the boundary drops the
//! rest instead.

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
use crate::algorithms::window::Windows;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};
use crate::math::{ceil_div, floor_div};
use crate::rate::Rate;

/// A sliding-window counter admitting an estimated `burst` per `burst / rate`.
///
/// ```
/// use sluice_core::{Algorithm, Rate, SlidingWindow};
/// let sw = SlidingWindow::new(Rate::per_minute(10), 10).unwrap();
/// let mut s = Default::default();
/// sw.check_and_apply(&mut s, 0, 10).unwrap();
/// // Half-way through the next window, half of the previous one still counts.
/// let d = sw.check_and_apply(&mut s, 90_000_000_000, 5).unwrap();
/// assert!(d.allowed);
/// assert_eq!(d.remaining, 0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindow {
    windows: Windows,
}

/// The sliding window's per-key state: the current window and two counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct SlidingWindowState {
    window: u64,
    previous: u32,
    current: u32,
}

impl SlidingWindow {
    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        self.windows.reduced_rate()
    }

    /// An estimated `burst` units per window of `burst / rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        Ok(Self {
            windows: Windows::new(rate, burst)?,
        })
    }

    /// The same limit, with debt ([`Algorithm::debit`]) forgiven at the
    /// end of the window it was charged in (`true`) instead of carried
    /// into the next windows, one burst paid off per window (`false`, the
    /// default).
    pub fn with_debt_forgiven(mut self, forgiven: bool) -> Self {
        self.windows.forgive = forgiven;
        self
    }

    /// Whether debt is forgiven at the end of its window.
    pub fn debt_forgiven(&self) -> bool {
        self.windows.forgive
    }

    /// The counts `(window, previous, current)` as seen at scaled time `t`,
    /// and the possibly clamped `t`. Rolling on one window, the current
    /// count becomes the previous one, at most one burst of it; the rest
    /// (debt) carries on as the new current count.
    fn view(&self, s: &SlidingWindowState, t: u128) -> (u64, u64, u64, u128) {
        let w = &self.windows;
        let index = w.index(t);
        if s.previous == 0 && s.current == 0 {
            return (index, 0, 0, t);
        }
        match s.window.cmp(&index) {
            std::cmp::Ordering::Equal => (index, s.previous.into(), s.current.into(), t),
            // The clock stepped back: stand still at the start of the stored window.
            std::cmp::Ordering::Greater => (
                s.window,
                s.previous.into(),
                s.current.into(),
                w.start(s.window),
            ),
            std::cmp::Ordering::Less => {
                let (current, rolled) = (u64::from(s.current), index - s.window);
                let previous = w.carried(current, rolled - 1).min(w.burst);
                (index, previous, w.carried(current, rolled), t)
            }
        }
    }

    /// `previous * (len - e) + current * len`: the estimate times `len`.
    fn weighted(&self, previous: u64, current: u64, e: u128) -> u128 {
        let len = self.windows.len;
        u128::from(previous)
            .saturating_mul(len - e)
            .saturating_add(u128::from(current).saturating_mul(len))
    }

    /// Scaled time at which a request of `cost` first passes, given the view.
    fn first_pass(&self, index: u64, previous: u64, current: u64, cost: u64) -> u128 {
        let w = &self.windows;
        let b = w.burst;
        if current + cost <= b {
            // In this window: previous * (len - e) <= (b - current - cost) * len.
            let slack = u128::from(b - current - cost) * w.len;
            let e = w.len - (slack / u128::from(previous.max(1))).min(w.len);
            w.start(index) + e
        } else {
            // In the first later window whose carried count leaves room
            // (the next one without debt, where `current` becomes the
            // previous count).
            let j = w.boundaries_to_clear(current + cost - b);
            let previous = w.carried(current, j - 1).min(b);
            let current = w.carried(current, j);
            let slack = u128::from(b - current - cost) * w.len;
            let e = w.len - (slack / u128::from(previous.max(1))).min(w.len);
            w.start_after(index, j).saturating_add(e)
        }
    }

    /// Scaled time at which the counts of the view are all gone.
    fn clear_at(&self, index: u64, previous: u64, current: u64) -> Option<u128> {
        let w = &self.windows;
        if current > 0 {
            Some(w.start_after(index, w.boundaries_to_clear(current) + 1))
        } else if previous > 0 {
            Some(w.start_after(index, 1))
        } else {
            None
        }
    }
}

impl Algorithm for SlidingWindow {
    type State = SlidingWindowState;
    type Update = SlidingWindowState;

    fn capacity(&self) -> u64 {
        self.windows.burst
    }

    #[inline]
    fn check(
        &self,
        state: &SlidingWindowState,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<SlidingWindowState>, CheckError> {
        let w = &self.windows;
        ensure_possible(cost, w.burst)?;
        let (index, previous, current, t) = self.view(state, w.scaled(now));
        let e = t - w.start(index);
        let weighted = |current: u64| self.weighted(previous, current, e);
        let capacity = u128::from(w.burst) * w.len;
        let reset_after = |current: u64| {
            self.clear_at(index, previous, current)
                .map_or(0, |at| w.until(t, at))
        };
        if weighted(current + cost) <= capacity {
            let used = current + cost;
            let decision = Decision {
                allowed: true,
                limit: w.burst,
                remaining: floor_div(capacity - weighted(used), w.len),
                reset_after: reset_after(used),
                retry_after: None,
                delay: 0,
            };
            let update = (cost > 0).then_some(SlidingWindowState {
                window: index,
                previous: previous as u32,
                current: used as u32,
            });
            Ok(Outcome { decision, update })
        } else {
            let pass_at = self.first_pass(index, previous, current, cost);
            let decision = Decision {
                allowed: false,
                limit: w.burst,
                remaining: floor_div(capacity.saturating_sub(weighted(current)), w.len),
                reset_after: reset_after(current),
                retry_after: Some(w.until(t, pass_at).max(1)),
                delay: 0,
            };
            Ok(Outcome {
                decision,
                update: None,
            })
        }
    }

    #[inline]
    fn apply(&self, state: &mut SlidingWindowState, update: SlidingWindowState) {
        *state = update;
    }

    /// From the count of the stored window (the latest that admitted
    /// anything), while it still weighs: it is the current or the previous
    /// window, or debt carried from it is.
    fn refund(&self, state: &mut SlidingWindowState, now: Nanos, amount: u64) {
        let w = &self.windows;
        let index = w.index(w.scaled(now));
        let weighs = state.window.saturating_add(1) >= index
            || w.carried(state.current.into(), index - state.window - 1) > 0;
        if weighs {
            let back = u32::try_from(amount).unwrap_or(u32::MAX);
            state.current = state.current.saturating_sub(back);
        }
    }

    /// Into the current window's count, while the estimate stays at most
    /// `burst + max_debt` and the count at most `u32::MAX`.
    fn debit(
        &self,
        state: &mut SlidingWindowState,
        now: Nanos,
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let w = &self.windows;
        let (index, previous, current, t) = self.view(state, w.scaled(now));
        // estimate + x <= burst + max_debt, for whole x, is
        // x <= burst + max_debt - ceil(estimate).
        let estimate = ceil_div(self.weighted(previous, current, t - w.start(index)), w.len);
        let ceiling = w.burst.saturating_add(max_debt);
        let room = ceiling
            .saturating_sub(estimate)
            .min(u64::from(u32::MAX) - current);
        let charged = room.min(amount);
        if charged > 0 {
            *state = SlidingWindowState {
                window: index,
                previous: previous as u32,
                current: (current + charged) as u32,
            };
        }
        Debited::of(amount, charged)
    }

    fn idle_at(&self, state: &SlidingWindowState) -> Nanos {
        let w = &self.windows;
        if state.current > 0 {
            let clear = w.boundaries_to_clear(state.current.into()) + 1;
            w.at(w.start(state.window.saturating_add(clear)))
        } else if state.previous > 0 {
            w.at(w.start(state.window.saturating_add(1)))
        } else {
            0
        }
    }
}
