//! `idle_at` is exactly when a key becomes forgettable: from then on its
//! state decides every request as a fresh key would, and it is the moment a
//! peek reports the limit full again (`now + reset_after`).

use crate::common;

use common::scenario::{Scenario, drive, per_algorithm};
use proptest::prelude::*;
use sluice_core::Algorithm;

fn forgettable_at_idle<A: Algorithm>(alg: &A, s: &Scenario) -> Result<(), TestCaseError> {
    let p = s.params;
    let fresh = A::State::default();
    drive(alg, s, |event| {
        let mut state = event.state.clone();
        if alg
            .check_and_apply(&mut state, event.now, event.cost)
            .is_err()
        {
            return Ok(());
        }
        let idle = alg.idle_at(&state);
        let peek = alg.check(&state, event.now, 0).expect("peek").decision;
        if peek.reset_after > 0 {
            prop_assert_eq!(idle, event.now + peek.reset_after, "idle_at vs reset_after");
        } else {
            prop_assert!(idle <= event.now, "idle_at {} after a full peek", idle);
        }
        let from = idle.max(event.now);
        for at in [
            from,
            from + 1,
            from + p.interval_ceil(),
            from + 3 * p.window_ceil(),
        ] {
            for cost in [0, 1, p.burst] {
                let kept = alg.check(&state, at, cost).expect("possible cost").decision;
                let forgot = alg.check(&fresh, at, cost).expect("possible cost").decision;
                prop_assert_eq!(kept, forgot, "at {} cost {}", at, cost);
            }
        }
        Ok(())
    })?;
    Ok(())
}

per_algorithm!(forgettable_at_idle: token_bucket_is_forgettable_at_idle, gcra_is_forgettable_at_idle, leaky_bucket_is_forgettable_at_idle, fixed_window_is_forgettable_at_idle, sliding_log_is_forgettable_at_idle, sliding_window_is_forgettable_at_idle);
