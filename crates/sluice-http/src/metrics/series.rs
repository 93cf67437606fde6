//! The series every decision increments, found once: a request's outcome
//! counter by its outcome, and a limit's decision counter by the address
//! of its kept labels ([`Labels`]) and its outcome. A decision then
//! neither builds nor hashes a label set: looking a limit's series up in
//! its family clones three names and hashes them with SipHash, on every
//! limit of every request (about 650 instructions of a `/v1/check` call).
//!
//! The families are never cleared, so a series found stays the one the
//! registry encodes. Kept labels live as long as the process and there are
//! at most [`MOST_KEPT`](sluice_policy::labels::MOST_KEPT) of them: the map
//! holds at most that many series per outcome. Counted labels (a limit a
//! client brings about) are looked up in the family each time, as before.

use std::collections::HashMap;
use std::sync::OnceLock;

use parking_lot::RwLock;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use sluice_policy::Labels;

use super::labels::{DecisionLabels, LimitOutcome, RequestLabels, RequestOutcome};

/// The series found so far. See the module docs.
#[derive(Debug, Default)]
pub(super) struct Series {
    /// By [`RequestOutcome`], in its order (one slot per outcome).
    requests: [OnceLock<Counter>; 7],
    /// By kept labels' address and outcome.
    decisions: RwLock<HashMap<(usize, LimitOutcome), Counter, foldhash::fast::RandomState>>,
}

impl Series {
    /// Counts a request with `outcome` in `family`.
    #[inline]
    pub(super) fn request(&self, family: &Family<RequestLabels, Counter>, outcome: RequestOutcome) {
        let find = || family.get_or_create(&RequestLabels { outcome }).clone();
        match self.requests.get(outcome as usize) {
            Some(found) => found.get_or_init(find).inc(),
            // An outcome past the slots: looked up each time.
            None => find().inc(),
        };
    }

    /// Counts one limit's decision, named by `labels`, in `family`.
    #[inline]
    pub(super) fn decision(
        &self,
        family: &Family<DecisionLabels, Counter>,
        labels: &Labels,
        outcome: LimitOutcome,
    ) {
        if !labels.is_kept() {
            family
                .get_or_create(&decision_labels(labels, outcome))
                .inc();
            return;
        }
        let key = (labels.addr(), outcome);
        if let Some(counter) = self.decisions.read().get(&key) {
            counter.inc();
            return;
        }
        let counter = family
            .get_or_create(&decision_labels(labels, outcome))
            .clone();
        counter.inc();
        self.decisions.write().insert(key, counter);
    }
}

/// The family's label set of one limit's decision.
fn decision_labels(labels: &Labels, outcome: LimitOutcome) -> DecisionLabels {
    DecisionLabels {
        limit: labels.limit.clone(),
        plan: labels.plan.clone(),
        endpoint: labels.endpoint.clone(),
        outcome,
    }
}

#[cfg(test)]
mod tests {
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    use sluice_policy::LimitLabels;

    use super::*;

    fn labels(name: &str) -> DecisionLabels {
        DecisionLabels {
            limit: name.into(),
            plan: "".into(),
            endpoint: "*".into(),
            outcome: LimitOutcome::allowed,
        }
    }

    /// Each limit and outcome counts in the family's own series, whether
    /// it was found once (kept labels) or looked up each time (counted).
    #[test]
    fn the_counts_land_in_the_familys_series() {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(10),
            burst: 10,
            nodelay: false,
        };
        let kept = |name: &str| LimitLabels::plain(name.into(), "*").kept(Some(&spec));
        let (a, b) = (kept("series-test-a"), kept("series-test-b"));
        let counted = LimitLabels::named("series-test-c".into(), "*");
        assert!(a.is_kept() && b.is_kept() && !counted.is_kept());
        let (decisions, requests) = (Family::default(), Family::default());
        let series = Series::default();
        for (l, outcome, times) in [
            (&a, LimitOutcome::allowed, 3),
            (&b, LimitOutcome::allowed, 1),
            (&a, LimitOutcome::limited, 2),
            (&counted, LimitOutcome::allowed, 2),
        ] {
            for _ in 0..times {
                series.decision(&decisions, l, outcome);
            }
        }
        let count = |name: &str, outcome| {
            decisions
                .get_or_create(&DecisionLabels {
                    outcome,
                    ..labels(name)
                })
                .get()
        };
        assert_eq!(count("series-test-a", LimitOutcome::allowed), 3);
        assert_eq!(count("series-test-a", LimitOutcome::limited), 2);
        assert_eq!(count("series-test-b", LimitOutcome::allowed), 1);
        assert_eq!(count("series-test-c", LimitOutcome::allowed), 2);
        for outcome in [
            RequestOutcome::allowed,
            RequestOutcome::allowed,
            RequestOutcome::internal,
        ] {
            series.request(&requests, outcome);
        }
        let count = |outcome| requests.get_or_create(&RequestLabels { outcome }).get();
        assert_eq!(count(RequestOutcome::allowed), 2);
        assert_eq!(count(RequestOutcome::internal), 1);
        assert_eq!(count(RequestOutcome::limited), 0);
    }
}
