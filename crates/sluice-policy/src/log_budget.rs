//! A budget of log lines: a line that a client can cause (a refusal, a
//! shadow breach, an unknown domain) is written at most so often, and the
//! lines left out are counted and reported with the next one, so that a
//! flood cannot drown the log.

use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_store::DirectLimiter;

/// At most `per_second` lines a second, in bursts of `burst`.
///
/// ```
/// let budget = sluice_policy::log_budget::LogBudget::new(1, 2);
/// assert_eq!(budget.take(), Some(0));
/// assert_eq!(budget.take(), Some(0));
/// assert_eq!(budget.take(), None, "the burst is spent: counted");
/// ```
#[derive(Debug)]
pub struct LogBudget {
    lines: Option<DirectLimiter>,
    left_out: AtomicU64,
}

impl LogBudget {
    /// A budget of `per_second` lines a second, in bursts of `burst`.
    pub fn new(per_second: u64, burst: u64) -> Self {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(per_second.max(1)),
            burst: burst.max(1),
            nodelay: true,
        };
        Self {
            lines: DirectLimiter::new(&spec).ok(),
            left_out: AtomicU64::new(0),
        }
    }

    /// Whether a line may be written now: `Some` with how many were left
    /// out since the last one, or `None` (this one is counted as left out).
    pub fn take(&self) -> Option<u64> {
        let may = self
            .lines
            .as_ref()
            .is_some_and(|l| l.check(1).is_ok_and(|d| d.allowed));
        if may {
            Some(self.left_out.swap(0, Ordering::Relaxed))
        } else {
            self.left_out.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}
