//! The breaker's transitions, logged at most once per interval: a store
//! that flaps (a timeout now and then under load, say) writes its opening
//! at most every ten seconds, with how many openings were not logged, and
//! its closing only after an opening that was logged, so that the log
//! always reads as pairs and its last line tells the state.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a flapping breaker's transitions are logged.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// Counts transitions and says when one may be logged.
#[derive(Debug)]
pub(crate) struct Flaps {
    epoch: Instant,
    /// When a transition was last logged, in ms since `epoch`, plus one (0:
    /// never).
    logged_at: AtomicU64,
    /// Openings since the last logged one.
    unlogged: AtomicU64,
    /// Whether the last opening was logged (and its closing is to be).
    open_logged: AtomicBool,
}

impl Flaps {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
            logged_at: AtomicU64::new(0),
            unlogged: AtomicU64::new(0),
            open_logged: AtomicBool::new(false),
        }
    }

    /// The breaker opened: `Some(n)` when this is to be logged, with the
    /// `n` openings not logged since the last one.
    pub(crate) fn opened(&self) -> Option<u64> {
        let n = self.log()?;
        self.open_logged.store(true, Ordering::Relaxed);
        Some(n)
    }

    /// Whether the breaker's last opening was logged (a still-open breaker
    /// whose opening was not is logged at its next failed probe after the
    /// interval, so that a lasting outage always shows).
    pub(crate) fn open_logged(&self) -> bool {
        self.open_logged.load(Ordering::Relaxed)
    }

    /// The breaker closed: whether to log it (its opening was).
    pub(crate) fn closed(&self) -> bool {
        self.open_logged.swap(false, Ordering::Relaxed)
    }

    /// A transition happened: `Some(n)` when it is to be logged, with the
    /// `n` transitions that were not logged since the last one; `None`
    /// when one was logged less than [`LOG_EVERY`] ago.
    fn log(&self) -> Option<u64> {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX - 1) + 1;
        let last = self.logged_at.load(Ordering::Relaxed);
        let every = u64::try_from(LOG_EVERY.as_millis()).unwrap_or(u64::MAX);
        if last != 0 && now.saturating_sub(last) < every {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        // One caller wins the line; the others count.
        if self
            .logged_at
            .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            self.unlogged.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        Some(self.unlogged.swap(0, Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_transition_is_logged_and_the_next_ones_counted() {
        let f = Flaps::new();
        assert_eq!(f.log(), Some(0));
        for _ in 0..5 {
            assert_eq!(f.log(), None);
        }
        // Thirty seconds after the last line, the next says how many were
        // not logged.
        let f = Flaps {
            epoch: Instant::now() - Duration::from_secs(30),
            logged_at: AtomicU64::new(1),
            unlogged: AtomicU64::new(5),
            open_logged: AtomicBool::new(false),
        };
        assert_eq!(f.log(), Some(5));
        assert_eq!(f.log(), None);
    }

    #[test]
    fn a_closing_is_logged_only_after_a_logged_opening() {
        let f = Flaps::new();
        assert!(!f.closed(), "nothing opened");
        assert_eq!(f.opened(), Some(0));
        assert!(f.closed());
        assert_eq!(f.opened(), None, "within ten seconds");
        assert!(!f.closed(), "its opening was not logged");
    }
}
