//! Fixed window: a counter per window, reset at every window boundary.
//!
//! Windows last `burst / rate` and are aligned to multiples of their length.
//! A request passes if the window's count plus its cost is at most `burst`.
//! Across a boundary a client can pass `burst` at the end of one window and
//! `burst` again at the start of the next: up to twice the limit in a short
//! span. That is the price of its tiny state and simple semantics.

use crate::algorithm::{Algorithm, Outcome, ensure_possible};
use crate::algorithms::window::Windows;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};
use crate::rate::Rate;

/// A fixed-window counter admitting `burst` per window of `burst / rate`.
///
/// ```
/// use sluice_core::{Algorithm, FixedWindow, Rate};
/// // 100 per minute: windows of one minute, aligned to whole minutes.
/// let fw = FixedWindow::new(Rate::per_minute(100), 100).unwrap();
/// let mut s = Default::default();
/// let d = fw.check_and_apply(&mut s, 45_000_000_000, 100).unwrap();
/// assert!(d.allowed);
/// assert_eq!(d.reset_after, 15_000_000_000); // the window ends at 60 s
/// assert!(!fw.check_and_apply(&mut s, 59_999_999_999, 1).unwrap().allowed);
/// assert!(fw.check_and_apply(&mut s, 60_000_000_000, 1).unwrap().allowed);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindow {
    windows: Windows,
}

/// The fixed window's per-key state: the window index and its count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct FixedWindowState {
    window: u64,
    count: u32,
}

impl FixedWindowState {
    /// The index of the window the count belongs to.
    pub fn window(&self) -> u64 {
        self.window
    }
    /// The units counted in that window.
    pub fn count(&self) -> u32 {
        self.count
    }
}

impl FixedWindow {
    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        self.windows.reduced_rate()
    }

    /// `burst` units per window of `burst / rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        Ok(Self {
            windows: Windows::new(rate, burst)?,
        })
    }

    /// The window length in nanoseconds, rounded up.
    pub fn window_len(&self) -> Nanos {
        self.windows.at(self.windows.len)
    }
}

impl Algorithm for FixedWindow {
    type State = FixedWindowState;
    type Update = FixedWindowState;

    fn capacity(&self) -> u64 {
        self.windows.burst
    }

    #[inline]
    fn check(
        &self,
        state: &FixedWindowState,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<FixedWindowState>, CheckError> {
        let w = &self.windows;
        ensure_possible(cost, w.burst)?;
        let mut t = w.scaled(now);
        let mut index = w.index(t);
        let mut count = 0;
        if state.count > 0 && state.window >= index {
            // Same window, or the clock stepped back: stay in the stored one.
            if state.window > index {
                index = state.window;
                t = w.start(index);
            }
            count = u64::from(state.count);
        }
        let end = w.start(index) + w.len;
        let until_end = w.until(t, end);
        if count + cost <= w.burst {
            let used = count + cost;
            let decision = Decision {
                allowed: true,
                limit: w.burst,
                remaining: w.burst - used,
                reset_after: if used > 0 { until_end } else { 0 },
                retry_after: None,
                delay: 0,
            };
            let update = (cost > 0).then_some(FixedWindowState {
                window: index,
                // used <= burst <= u32::MAX
                count: used as u32,
            });
            Ok(Outcome { decision, update })
        } else {
            let decision = Decision {
                allowed: false,
                limit: w.burst,
                remaining: w.burst - count,
                reset_after: until_end,
                retry_after: Some(until_end),
                delay: 0,
            };
            Ok(Outcome {
                decision,
                update: None,
            })
        }
    }

    #[inline]
    fn apply(&self, state: &mut FixedWindowState, update: FixedWindowState) {
        *state = update;
    }

    fn refund(&self, state: &mut FixedWindowState, now: Nanos, amount: u64) {
        let w = &self.windows;
        // The stored window, if it is still (or, after a step back, ahead
        // of) the current one.
        if state.window >= w.index(w.scaled(now)) {
            let back = u32::try_from(amount).unwrap_or(u32::MAX);
            state.count = state.count.saturating_sub(back);
        }
    }

    fn idle_at(&self, state: &FixedWindowState) -> Nanos {
        if state.count == 0 {
            return 0;
        }
        self.windows
            .at(self.windows.start(state.window.saturating_add(1)))
    }
}
