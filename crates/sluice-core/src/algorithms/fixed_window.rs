//! Fixed window: a counter per window, reset at every window boundary.
//!
//! Windows last `burst / rate` and are aligned to multiples of their length.
//! A request passes if the window's count plus its cost is at most `burst`.
//! Across a boundary a client can pass `burst` at the end of one window and
//! `burst` again at the start of the next: up to twice the limit in a short
//! span. That is the price of its tiny state and simple semantics.
//!
//! Debt ([`Algorithm::debit`]) is a count above `burst`. Each window boundary
//! pays off one burst of it and carries the rest into the next window, whose
//! requests are refused until the carried count leaves room; with
//! [`FixedWindow::with_debt_forgiven`] the boundary drops it instead.

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
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

    /// The window length in nanoseconds, rounded up.
    pub fn window_len(&self) -> Nanos {
        self.windows.at(self.windows.len)
    }

    /// The window and its count as seen at scaled time `t` (debt carried
    /// in from an earlier window included), and the possibly clamped `t`.
    fn view(&self, s: &FixedWindowState, t: u128) -> (u64, u64, u128) {
        let w = &self.windows;
        let index = w.index(t);
        let count = u64::from(s.count);
        if count == 0 {
            return (index, 0, t);
        }
        match s.window.cmp(&index) {
            std::cmp::Ordering::Equal => (index, count, t),
            // The clock stepped back: stay in the stored window.
            std::cmp::Ordering::Greater => (s.window, count, w.start(s.window)),
            std::cmp::Ordering::Less => (index, w.carried(count, index - s.window), t),
        }
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
        let (index, count, t) = self.view(state, w.scaled(now));
        if count + cost <= w.burst {
            let used = count + cost;
            let decision = Decision {
                allowed: true,
                limit: w.burst,
                remaining: w.burst - used,
                reset_after: if used > 0 {
                    w.until(t, w.start(index) + w.len)
                } else {
                    0
                },
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
            // count + cost > burst >= cost, so count > 0. Without debt both
            // are the end of this window.
            let fits = w.boundaries_to_clear(count + cost - w.burst);
            let clear = w.boundaries_to_clear(count);
            let decision = Decision {
                allowed: false,
                limit: w.burst,
                remaining: w.burst.saturating_sub(count),
                reset_after: w.until(t, w.start_after(index, clear)),
                retry_after: Some(w.until(t, w.start_after(index, fits))),
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

    /// From the count of the current window (debt carried into it
    /// included): a cost charged in an earlier window without debt has
    /// already been given back by that window's end.
    fn refund(&self, state: &mut FixedWindowState, now: Nanos, amount: u64) {
        let w = &self.windows;
        let (index, count, _) = self.view(state, w.scaled(now));
        if count > 0 {
            *state = FixedWindowState {
                window: index,
                // At most the count it was.
                count: count.saturating_sub(amount) as u32,
            };
        }
    }

    /// Into the current window's count, up to `burst + max_debt` and
    /// `u32::MAX`.
    fn debit(
        &self,
        state: &mut FixedWindowState,
        now: Nanos,
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let w = &self.windows;
        let (index, count, _) = self.view(state, w.scaled(now));
        let ceiling = w.burst.saturating_add(max_debt).min(u64::from(u32::MAX));
        let charged = ceiling.saturating_sub(count).min(amount);
        if charged > 0 {
            *state = FixedWindowState {
                window: index,
                // count + charged <= ceiling <= u32::MAX.
                count: (count + charged) as u32,
            };
        }
        Debited::of(amount, charged)
    }

    fn idle_at(&self, state: &FixedWindowState) -> Nanos {
        if state.count == 0 {
            return 0;
        }
        let clear = self.windows.boundaries_to_clear(state.count.into());
        self.windows
            .at(self.windows.start(state.window.saturating_add(clear)))
    }
}
