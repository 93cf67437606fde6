//! The sliding log's debt: cost charged beyond what the window held
//! ([`Algorithm::debit`](crate::Algorithm::debit)), logged at the earliest
//! times it fits.
//!
//! While a log has debt, it holds exactly what weighs in the window (the
//! debit pruned the rest), so its entries lie within one window. Every
//! entry that leaves the window is logged again at the nanosecond it
//! leaves (`ceil(W)` after its time), for as much of its cost as there is
//! debt, and the debt falls by as much. The window thus stays full, and the
//! debt falls by one window's worth of entries per window: the rate.
//!
//! Entries leave in rounds: round `j` of entry `e` is at `at_e + j * ceil(W)`,
//! and since the entries lie within one window, round `j` of every entry
//! comes before round `j + 1` of any. So the log at any later time follows
//! in closed form, in one pass over the entries.

use crate::algorithm::Outcome;
use crate::algorithms::sliding_log::{LogAppend, SlidingLog, SlidingLogState};
use crate::clock::Nanos;
use crate::decision::Decision;

impl SlidingLog {
    /// Logs the debt due by `now` (see the module docs); with debt
    /// forgiven, drops it once the first entry has left the window.
    pub(super) fn renew(&self, s: &mut SlidingLogState, now: Nanos) {
        if s.debt == 0 {
            return;
        }
        let Some(&(first, _)) = s.entries.front() else {
            return;
        };
        let period = self.period();
        // Not before the first entry leaves the window (if it ever does).
        if first.checked_add(period).is_none_or(|out| now < out) {
            return;
        }
        if self.windows.forgive {
            s.debt = 0;
            return;
        }
        let total: u128 = s.entries.iter().map(|(_, c)| u128::from(*c)).sum();
        if total == 0 {
            return;
        }
        // Rounds 1..rounds of the first entry are due, and rounds
        // 1..rounds - 1 of every entry; round `rounds` of the oldest few.
        let rounds = (now - first) / period;
        let due = |at: Nanos| at.saturating_add(rounds.saturating_mul(period)) <= now;
        let due_cost: u128 = (s.entries.iter())
            .take_while(|(at, _)| due(*at))
            .map(|(_, c)| u128::from(*c))
            .sum();
        let needed = u128::from(rounds - 1) * total + due_cost;
        // Every entry is logged again `full` times, and the oldest once more
        // for `extra` of their cost.
        let (full, extra) = if u128::from(s.debt) >= needed {
            // needed <= debt, a u64.
            s.debt -= needed as u64;
            (rounds - 1, due_cost)
        } else {
            let debt = u128::from(s.debt);
            s.debt = 0;
            // debt / total <= debt, a u64.
            ((debt / total) as u64, debt % total)
        };
        let mut left = extra;
        let mut moved = 0;
        for (at, cost) in s.entries.iter_mut() {
            let mut times = full;
            if left > 0 {
                times += 1;
                moved += 1;
                // At most the cost, a u64: the last one logged in part.
                let logged = u128::from(*cost).min(left);
                *cost = logged as u64;
                left -= logged;
            }
            *at = at.saturating_add(times.saturating_mul(period));
        }
        // Those logged once more are now the newest.
        s.entries.rotate_left(moved);
    }

    /// How long an entry stays in the window, in whole nanoseconds:
    /// `ceil(W)`, after which it is logged again while there is debt.
    fn period(&self) -> Nanos {
        self.windows.at(self.windows.len)
    }

    /// The log once all of its debt is logged (still with some debt only
    /// if that takes past the last nanosecond a u64 holds).
    pub(super) fn paid_off(&self, s: &SlidingLogState) -> SlidingLogState {
        let mut paid = s.clone();
        self.renew(&mut paid, Nanos::MAX);
        paid
    }

    /// The decision on a log with debt at scaled time `t` (`view`, brought
    /// up to `t`): refused, nothing remaining; the retry waits until the
    /// debt is all logged and then until `cost` fits.
    pub(super) fn in_debt(&self, view: &SlidingLogState, t: u128, cost: u64) -> Outcome<LogAppend> {
        let w = &self.windows;
        let paid = self.paid_off(view);
        // The debt is all logged at the newest entry's time (the last
        // departure), or dropped at the first departure.
        let (paid_at, cleared_at) = match (paid.debt, paid.entries.front(), paid.entries.back()) {
            (0, Some((first, _)), Some((newest, _))) if w.forgive => (
                w.scaled(first.saturating_add(self.period())),
                self.expiry(*newest),
            ),
            (0, _, Some((newest, _))) => (w.scaled(*newest), self.expiry(*newest)),
            _ => (u128::MAX, u128::MAX),
        };
        let used = self.live(&paid, t).map(|(_, c)| c).sum();
        let pass_at = self.first_pass(&paid, t, used, cost).max(paid_at);
        let decision = Decision {
            allowed: false,
            limit: w.burst,
            remaining: 0,
            reset_after: w.until(t, cleared_at),
            retry_after: Some(w.until(t, pass_at)),
            delay: 0,
        };
        Outcome {
            decision,
            update: None,
        }
    }
}
