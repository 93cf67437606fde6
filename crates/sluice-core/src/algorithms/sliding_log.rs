//! Sliding-window log: the exact count of what passed in the last window.
//!
//! Every admitted request is logged with its time and cost. A request of cost
//! `n` passes if the cost logged in the window `(now - W, now]` plus `n` is at
//! most `burst`, where `W = burst / rate`. It is exact, and it pays for that:
//! the log of one key holds up to `burst` entries (requests at the same
//! nanosecond share one). Its burst is therefore capped at
//! [`MAX_LOG_BURST`]; use the sliding-window counter for larger quotas.

use std::collections::VecDeque;

use crate::algorithm::{Algorithm, Outcome, ensure_possible};
use crate::algorithms::window::Windows;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};
use crate::rate::Rate;

/// The largest burst the sliding log accepts: its per-key memory is
/// O(burst), 16 bytes per entry, so at most 160 KiB per key.
pub const MAX_LOG_BURST: u64 = 10_000;

/// An exact sliding-window log admitting `burst` per `burst / rate`.
///
/// ```
/// use sluice_core::{Algorithm, Rate, SlidingLog};
/// let log = SlidingLog::new(Rate::per_second(2), 2).unwrap(); // 2 per 1 s
/// let mut s = Default::default();
/// log.check_and_apply(&mut s, 0, 1).unwrap();
/// log.check_and_apply(&mut s, 600_000_000, 1).unwrap();
/// let refused = log.check_and_apply(&mut s, 700_000_000, 1).unwrap();
/// // The first entry leaves the window at 1 s.
/// assert_eq!(refused.retry_after, Some(300_000_000));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingLog {
    windows: Windows,
}

/// The log of one key: `(time, cost)` of each admitted request, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    entries: VecDeque<(Nanos, u64)>,
}

impl SlidingLogState {
    /// The number of entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The change an admitted request makes to the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogAppend {
    at: Nanos,
    cost: u64,
}

impl SlidingLog {
    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        self.windows.reduced_rate()
    }

    /// `burst` units per sliding window of `burst / rate`.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        if burst > MAX_LOG_BURST {
            return Err(LimitError::BurstTooLarge {
                burst,
                max: MAX_LOG_BURST,
            });
        }
        Ok(Self {
            windows: Windows::new(rate, burst)?,
        })
    }

    /// Scaled time at which an entry logged at `at` leaves the window.
    fn expiry(&self, at: Nanos) -> u128 {
        self.windows.scaled(at) + self.windows.len
    }

    fn live<'a>(
        &'a self,
        s: &'a SlidingLogState,
        t: u128,
    ) -> impl Iterator<Item = &'a (Nanos, u64)> + 'a {
        s.entries.iter().filter(move |(at, _)| self.expiry(*at) > t)
    }
}

impl Algorithm for SlidingLog {
    type State = SlidingLogState;
    type Update = LogAppend;

    fn capacity(&self) -> u64 {
        self.windows.burst
    }

    #[inline]
    fn check(
        &self,
        state: &SlidingLogState,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<LogAppend>, CheckError> {
        let w = &self.windows;
        ensure_possible(cost, w.burst)?;
        // A clock that stepped back stands still at the newest entry.
        let now = state.entries.back().map_or(now, |(at, _)| now.max(*at));
        let t = w.scaled(now);
        let used: u64 = self.live(state, t).map(|(_, c)| c).sum();
        let newest_expiry = |extra: bool| {
            if extra {
                self.expiry(now)
            } else {
                self.live(state, t)
                    .last()
                    .map_or(t, |(at, _)| self.expiry(*at))
            }
        };
        if used + cost <= w.burst {
            let decision = Decision {
                allowed: true,
                limit: w.burst,
                remaining: w.burst - used - cost,
                reset_after: w.until(t, newest_expiry(cost > 0)),
                retry_after: None,
                delay: 0,
            };
            let update = (cost > 0).then_some(LogAppend { at: now, cost });
            Ok(Outcome { decision, update })
        } else {
            // Free the oldest entries until the request fits.
            let mut to_free = used + cost - w.burst;
            let mut pass_at = t;
            for (at, c) in self.live(state, t) {
                pass_at = self.expiry(*at);
                to_free = to_free.saturating_sub(*c);
                if to_free == 0 {
                    break;
                }
            }
            let decision = Decision {
                allowed: false,
                limit: w.burst,
                remaining: w.burst - used,
                reset_after: w.until(t, newest_expiry(false)),
                retry_after: Some(w.until(t, pass_at)),
                delay: 0,
            };
            Ok(Outcome {
                decision,
                update: None,
            })
        }
    }

    #[inline]
    fn apply(&self, state: &mut SlidingLogState, update: LogAppend) {
        let t = self.windows.scaled(update.at);
        while let Some((at, _)) = state.entries.front() {
            if self.expiry(*at) > t {
                break;
            }
            state.entries.pop_front();
        }
        match state.entries.back_mut() {
            Some((at, c)) if *at == update.at => *c += update.cost,
            _ => state.entries.push_back((update.at, update.cost)),
        }
    }

    /// From the newest entries: whole entries dropped, the last one cut.
    fn refund(&self, state: &mut SlidingLogState, _now: Nanos, amount: u64) {
        let mut left = amount.min(self.windows.burst);
        while left > 0 {
            let Some((_, c)) = state.entries.back_mut() else {
                break;
            };
            if *c > left {
                *c -= left;
                break;
            }
            left -= *c;
            state.entries.pop_back();
        }
    }

    fn idle_at(&self, state: &SlidingLogState) -> Nanos {
        state
            .entries
            .back()
            .map_or(0, |(at, _)| self.windows.at(self.expiry(*at)))
    }
}
