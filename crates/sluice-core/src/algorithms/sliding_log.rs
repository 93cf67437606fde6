//! Sliding-window log: the exact count of what passed in the last window.
//!
//! Every admitted request is logged with its time and cost. A request of cost
//! `n` passes if the cost logged in the window `(now - W, now]` plus `n` is at
//! most `burst`, where `W = burst / rate`. It is exact, and it pays for that:
//! the log of one key holds up to `burst` entries (requests at the same
//! nanosecond share one). Its burst is therefore capped at
//! [`MAX_LOG_BURST`]; use the sliding-window counter for larger quotas.
//!
//! Debt ([`Algorithm::debit`]): a debit logs what the window still holds
//! at `now`, and keeps the rest as debt, cost not logged yet. While there is
//! debt, every entry that leaves the window is logged again at the
//! nanosecond it leaves, for as much of its cost as there is debt, which
//! falls by as much: the debt is logged at the earliest times it fits, one
//! burst per window (see `log_debt.rs`). Every request is refused until it
//! is all logged. With [`SlidingLog::with_debt_forgiven`] the debt is
//! dropped when the first entry leaves the window instead.

use std::borrow::Cow;
use std::collections::VecDeque;

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
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
    pub(super) windows: Windows,
}

/// The log of one key: `(time, cost)` of each admitted request, oldest
/// first, and its debt.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SlidingLogState {
    pub(super) entries: VecDeque<(Nanos, u64)>,
    /// Cost charged beyond what the window held, not logged yet. While it
    /// is positive, `entries` holds exactly what weighs in the window.
    pub(super) debt: u64,
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

    /// Cost charged beyond what the window held, not logged yet, as of
    /// the last change (see [`Algorithm::debit`]).
    pub fn debt(&self) -> u64 {
        self.debt
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

    /// The same limit, with debt ([`Algorithm::debit`]) dropped when the
    /// first entry leaves the window (`true`: the log's reset) instead of
    /// logged as entries leave, one burst per window (`false`, the
    /// default).
    pub fn with_debt_forgiven(mut self, forgiven: bool) -> Self {
        self.windows.forgive = forgiven;
        self
    }

    /// Whether debt is dropped when the first entry leaves the window.
    pub fn debt_forgiven(&self) -> bool {
        self.windows.forgive
    }

    /// Scaled time at which an entry logged at `at` leaves the window.
    pub(super) fn expiry(&self, at: Nanos) -> u128 {
        self.windows.scaled(at) + self.windows.len
    }

    /// The time a decision stands at: a clock that stepped back stands
    /// still at the newest entry.
    fn stand_at(s: &SlidingLogState, now: Nanos) -> Nanos {
        s.entries.back().map_or(now, |(at, _)| now.max(*at))
    }

    /// The state as it stands at `now`: with debt, the entries that left
    /// the window since were logged again.
    fn view<'a>(&self, s: &'a SlidingLogState, now: Nanos) -> Cow<'a, SlidingLogState> {
        if s.debt == 0 {
            return Cow::Borrowed(s);
        }
        let mut renewed = s.clone();
        self.renew(&mut renewed, now);
        Cow::Owned(renewed)
    }

    /// Scaled time at which a request of `cost` first passes in a log
    /// without debt, where `used` weighs at `t`: the oldest entries leave
    /// until it fits.
    pub(super) fn first_pass(&self, s: &SlidingLogState, t: u128, used: u64, cost: u64) -> u128 {
        let mut to_free = (used + cost).saturating_sub(self.windows.burst);
        let mut pass_at = t;
        for (at, c) in self.live(s, t) {
            if to_free == 0 {
                break;
            }
            pass_at = self.expiry(*at);
            to_free = to_free.saturating_sub(*c);
        }
        pass_at
    }

    /// Adds `cost` logged at `at` (not before the newest entry), in one
    /// entry with the newest if it has the same time.
    fn log(s: &mut SlidingLogState, at: Nanos, cost: u64) {
        match s.entries.back_mut() {
            Some((newest, c)) if *newest == at => *c = c.saturating_add(cost),
            _ => s.entries.push_back((at, cost)),
        }
    }

    /// Drops the entries that left the window by scaled time `t`.
    fn prune(&self, s: &mut SlidingLogState, t: u128) {
        while let Some((at, _)) = s.entries.front() {
            if self.expiry(*at) > t {
                break;
            }
            s.entries.pop_front();
        }
    }

    pub(super) fn live<'a>(
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
        let now = Self::stand_at(state, now);
        let t = w.scaled(now);
        let view = self.view(state, now);
        if view.debt > 0 {
            return Ok(self.in_debt(&view, t, cost));
        }
        let state = &*view;
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
            let decision = Decision {
                allowed: false,
                limit: w.burst,
                remaining: w.burst - used,
                reset_after: w.until(t, newest_expiry(false)),
                retry_after: Some(w.until(t, self.first_pass(state, t, used, cost))),
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
        self.renew(state, update.at);
        self.prune(state, self.windows.scaled(update.at));
        Self::log(state, update.at, update.cost);
    }

    /// From the debt first (the newest cost, not logged yet), then the
    /// newest entries: whole entries dropped, the last one cut.
    fn refund(&self, state: &mut SlidingLogState, now: Nanos, amount: u64) {
        self.renew(state, Self::stand_at(state, now));
        let from_debt = amount.min(state.debt);
        state.debt -= from_debt;
        let mut left = (amount - from_debt).min(self.windows.burst);
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

    /// Into the window at `now` while it holds less than `burst`, the rest
    /// into the debt, while the cost weighing and the debt stay at most
    /// `burst + max_debt`.
    fn debit(
        &self,
        state: &mut SlidingLogState,
        now: Nanos,
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        if amount == 0 {
            return Debited::default();
        }
        let w = &self.windows;
        let now = Self::stand_at(state, now);
        self.renew(state, now);
        // Only what weighs stays: it is what the debt is logged behind.
        self.prune(state, w.scaled(now));
        let logged: u64 = state.entries.iter().map(|(_, c)| c).sum();
        let used = logged.saturating_add(state.debt);
        let charged = w
            .burst
            .saturating_add(max_debt)
            .saturating_sub(used)
            .min(amount);
        let logged_now = charged.min(w.burst.saturating_sub(used));
        if logged_now > 0 {
            Self::log(state, now, logged_now);
        }
        state.debt += charged - logged_now;
        Debited::of(amount, charged)
    }

    /// The newest entry's expiry once the debt is all logged.
    fn idle_at(&self, state: &SlidingLogState) -> Nanos {
        let paid;
        let state = if state.debt > 0 {
            paid = self.paid_off(state);
            if paid.debt > 0 {
                return Nanos::MAX;
            }
            &paid
        } else {
            state
        };
        state
            .entries
            .back()
            .map_or(0, |(at, _)| self.windows.at(self.expiry(*at)))
    }
}
