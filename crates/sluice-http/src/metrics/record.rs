//! Recording a decided request: its outcome, each limit's decision, the
//! wait of a delayed request, and what a refusal tells (retry-after, the
//! refused key, a refusal within the plan).

use std::time::Duration;

use sluice_policy::{DecideError, Labels, Outcome, Verdict};

use super::Metrics;
use super::labels::{LimitNameLabels, LimitOutcome, RequestOutcome};

impl Metrics {
    /// Records a decided request.
    pub fn record(&self, verdict: &Verdict) {
        let outcome = RequestOutcome::from(Outcome::of_verdict(verdict));
        self.count_request(outcome);
        let delay = verdict.delay();
        if verdict.allowed && delay > 0 {
            self.families
                .queue_wait
                .observe(Duration::from_nanos(delay).as_secs_f64());
        }
        let plan_refused = self.count_applied(verdict);
        self.count_shadow(verdict);
        if outcome == RequestOutcome::limited {
            self.note_refusal(verdict, plan_refused);
        }
    }

    /// Records a request that could not be decided.
    pub fn record_error(&self, e: &DecideError) {
        let outcome = RequestOutcome::from(Outcome::of_error(e));
        self.count_request(outcome);
    }

    /// Records either.
    pub fn record_result(&self, decided: &Result<Verdict, DecideError>) {
        match decided {
            Ok(v) => self.record(v),
            Err(e) => self.record_error(e),
        }
    }

    /// Counts a request with `outcome`.
    fn count_request(&self, outcome: RequestOutcome) {
        let f = &self.families;
        f.series.request(&f.requests, outcome);
    }

    /// Counts each applied limit's decision and observes the retry-after of
    /// each refusal; whether a plan's limit refused the request.
    fn count_applied(&self, verdict: &Verdict) -> bool {
        let mut plan_refused = false;
        for r in &verdict.results {
            let outcome = match (r.decision.allowed, r.decision.delay > 0) {
                (false, _) => LimitOutcome::limited,
                (true, true) => LimitOutcome::delayed,
                (true, false) => LimitOutcome::allowed,
            };
            self.count(&r.labels, outcome);
            if !r.decision.allowed {
                plan_refused |= !r.labels.plan.is_empty();
                if let Some(retry) = r.decision.retry_after {
                    self.families
                        .retry_after
                        .get_or_create(&LimitNameLabels {
                            limit: r.labels.limit.clone(),
                        })
                        .observe(Duration::from_nanos(retry).as_secs_f64());
                }
            }
        }
        plan_refused
    }

    /// Counts each shadow limit's would-be decision.
    fn count_shadow(&self, verdict: &Verdict) {
        for r in &verdict.shadow {
            let outcome = if r.decision.allowed {
                LimitOutcome::shadow_allowed
            } else {
                LimitOutcome::shadow_limited
            };
            self.count(&r.labels, outcome);
        }
    }

    /// Logs and reports a refused request, counts it as refused within its
    /// plan unless `plan_refused`, and notes the key it was refused under.
    fn note_refusal(&self, verdict: &Verdict, plan_refused: bool) {
        self.rejections.refused(verdict);
        self.events.refused(verdict);
        if !plan_refused && verdict.results.iter().any(|r| !r.labels.plan.is_empty()) {
            self.families.within_plan.inc();
        }
        // The key the request was refused under, once per request.
        if let Some(r) = verdict.violated().next() {
            self.top.record(r.key);
        }
    }

    /// Counts one limit's decision.
    fn count(&self, labels: &Labels, outcome: LimitOutcome) {
        let f = &self.families;
        f.series.decision(&f.decisions, labels, outcome);
    }
}
