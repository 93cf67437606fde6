//! Logging refusals, rate-limited itself: a flood of 429s must not drown
//! the log.
//!
//! Each refusal is logged at `info` under the target `sluice::rejections`
//! with its limit, plan, endpoint, the key's hash prefix and the time until
//! retry, at most 10 lines a second (bursts of 20). Refusals beyond that are
//! counted, and the next line says how many were left out. Turn the lines
//! off with `SLUICE_LOG=info,sluice::rejections=off`.

use sluice_policy::Verdict;
use sluice_policy::log_budget::LogBudget;

/// A rate-limited logger of refusals. See the module docs.
#[derive(Debug)]
pub struct RejectionLog {
    budget: LogBudget,
}

impl Default for RejectionLog {
    fn default() -> Self {
        Self::new(10, 20)
    }
}

impl RejectionLog {
    /// At most `per_second` lines a second, in bursts of `burst`.
    pub fn new(per_second: u64, burst: u64) -> Self {
        Self {
            budget: LogBudget::new(per_second, burst),
        }
    }

    /// Logs a refusal, unless too many were logged lately.
    pub fn refused(&self, verdict: &Verdict) {
        if !tracing::enabled!(target: "sluice::rejections", tracing::Level::INFO) {
            return;
        }
        let Some(r) = verdict.violated().next() else {
            return;
        };
        let Some(left_out) = self.budget.take() else {
            return;
        };
        let key = r.key.to_hex();
        tracing::info!(
            target: "sluice::rejections",
            limit = %r.labels.limit,
            plan = %r.labels.plan,
            endpoint = %r.labels.endpoint,
            key = &key[..16],
            retry_after_ms = r.decision.retry_after.unwrap_or(0).div_ceil(1_000_000),
            left_out,
            "request limited"
        );
    }
}
