//! The durations in a decision are promises, checked against the engine
//! itself with no other requests in between:
//!
//! * a refused request retried after exactly `retry_after` passes, and one
//!   retried a nanosecond earlier is still refused;
//! * after exactly `reset_after` the limit is full again (a peek reports
//!   `remaining == limit`), and a nanosecond earlier it is not.

use crate::common;

use common::scenario::{Scenario, drive, per_algorithm};
use proptest::prelude::*;
use sluice_core::Algorithm;

fn durations_are_exact<A: Algorithm>(alg: &A, s: &Scenario) -> Result<(), TestCaseError> {
    let burst = s.params.burst;
    let peek = |state: &A::State, at: u64| {
        alg.check(state, at, 0)
            .expect("a peek is always possible")
            .decision
    };
    drive(alg, s, |event| {
        let Ok(outcome) = event.result else {
            return Ok(());
        };
        let (now, cost, d) = (event.now, event.cost, outcome.decision);

        // The state this request leaves behind.
        let mut after = event.state.clone();
        alg.check_and_apply(&mut after, now, cost)
            .expect("possible cost");
        let full_at = now + d.reset_after;
        prop_assert_eq!(peek(&after, full_at).remaining, burst, "full at reset");
        if d.reset_after > 0 {
            prop_assert!(peek(&after, full_at - 1).remaining < burst, "full early");
        }

        match d.retry_after {
            None => prop_assert!(d.allowed),
            Some(wait) => {
                prop_assert!(!d.allowed);
                prop_assert!(wait > 0, "refused now, so the wait is positive");
                let mut retried = event.state.clone();
                let again = alg.check_and_apply(&mut retried, now + wait, cost);
                prop_assert!(again.expect("possible cost").allowed, "retry refused");
                let early = alg.check(event.state, now + wait - 1, cost);
                prop_assert!(!early.expect("possible cost").decision.allowed, "not tight");
            }
        }
        Ok(())
    })?;
    Ok(())
}

per_algorithm!(durations_are_exact: token_bucket_durations_are_exact, gcra_durations_are_exact, leaky_bucket_durations_are_exact, fixed_window_durations_are_exact, sliding_log_durations_are_exact, sliding_window_durations_are_exact);
