//! Sliding-window counter: two fixed-window counts, the previous one weighted
//! by how much of it the sliding window still overlaps.
//!
//! With windows of length `W = burst / rate` and `e` the time elapsed in the
//! current window, the estimated use is
//! `previous * (W - e) / W + current`. A request of cost `n` passes if the
//! estimate plus `n` is at most `burst`. The comparison is done exactly, in
//! integers, without ever rounding the estimate.

use crate::algorithm::{Algorithm, Outcome, ensure_possible};
use crate::algorithms::window::Windows;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};
use crate::math::floor_div;
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

    /// The counts `(window, previous, current)` as seen at scaled time `t`,
    /// and the possibly clamped `t`.
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
            std::cmp::Ordering::Less if s.window + 1 == index => (index, s.current.into(), 0, t),
            std::cmp::Ordering::Less => (index, 0, 0, t),
        }
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
            // In the next window, where `current` becomes the previous count.
            let slack = u128::from(b - cost) * w.len;
            let e = w.len - (slack / u128::from(current.max(1))).min(w.len);
            w.start(index + 1) + e
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
        let start = w.start(index);
        let e = t - start;
        let weighted =
            |current: u64| u128::from(previous) * (w.len - e) + u128::from(current) * w.len;
        let capacity = u128::from(w.burst) * w.len;
        let reset_after = |current: u64| {
            if current > 0 {
                w.until(t, start + 2 * w.len)
            } else if previous > 0 {
                w.until(t, start + w.len)
            } else {
                0
            }
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
    /// anything), while it is the current or the previous window.
    fn refund(&self, state: &mut SlidingWindowState, now: Nanos, amount: u64) {
        let w = &self.windows;
        if state.window.saturating_add(1) >= w.index(w.scaled(now)) {
            let back = u32::try_from(amount).unwrap_or(u32::MAX);
            state.current = state.current.saturating_sub(back);
        }
    }

    fn idle_at(&self, state: &SlidingWindowState) -> Nanos {
        let w = &self.windows;
        if state.current > 0 {
            w.at(w.start(state.window.saturating_add(2)))
        } else if state.previous > 0 {
            w.at(w.start(state.window.saturating_add(1)))
        } else {
            0
        }
    }
}
