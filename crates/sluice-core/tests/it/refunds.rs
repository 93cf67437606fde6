//! Refunds against the reference models: on random limits and request
//! sequences in which some steps give their cost back instead of asking
//! for it, every decision, and the state each refund leaves (read by a
//! peek), equals the model's, field by field.
//!
//! A refund never fails, whatever its amount (even above the burst: it
//! leaves the limit full, never in credit).

use crate::common;

use common::Params;
use common::models::{
    FixedWindowModel, LeakyBucketModel, Model, SlidingLogModel, SlidingWindowModel,
    TokenBucketModel, decide,
};
use common::scenario::{self, Scenario, SimClock, config, scenario};
use proptest::prelude::*;
use sluice_core::Algorithm;

/// Drives the engine and the model through the scenario; the steps whose
/// flag (cycled) is set are refunds of their cost.
fn refunds_match<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    scenario: &Scenario,
    refunds: &[bool],
) -> Result<(), TestCaseError> {
    let Params { burst, .. } = scenario.params;
    let mut clock = SimClock::new(scenario.params, scenario.start);
    let mut state = A::State::default();
    for (i, step) in scenario.steps.iter().enumerate() {
        let (now, cost) = clock.next(step);
        if refunds[i % refunds.len()] {
            alg.refund(&mut state, now, cost);
            model.refund(now, cost);
            let seen = alg.check(&state, now, 0).map(|o| o.decision);
            prop_assert_eq!(
                seen,
                Ok(decide(&model, now, 0)),
                "step {}: after a refund of {} at {}, model {:?}",
                i,
                cost,
                now,
                model
            );
            continue;
        }
        if cost > burst {
            prop_assert!(alg.check(&state, now, cost).is_err());
            continue;
        }
        let outcome = alg
            .check(&state, now, cost)
            .map_err(|e| TestCaseError::fail(format!("step {i}: cost {cost} refused as {e:?}")))?;
        let expected = decide(&model, now, cost);
        prop_assert_eq!(
            outcome.decision,
            expected,
            "step {}: now {} cost {}, model {:?}",
            i,
            now,
            cost,
            model
        );
        clock.saw(outcome.decision);
        if let Some(update) = outcome.update {
            alg.apply(&mut state, update);
            model.admit(now, cost);
        }
    }
    Ok(())
}

/// Which steps refund: about one in three.
fn flags() -> impl Strategy<Value = Vec<bool>> {
    prop::collection::vec(prop::bool::weighted(0.35), 1..8)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_bucket_refunds_match_its_model(s in scenario(), r in flags()) {
        let p = s.params;
        refunds_match(&scenario::token_bucket(p), TokenBucketModel::new(p), &s, &r)?;
    }

    #[test]
    fn gcra_refunds_match_the_token_bucket_model(s in scenario(), r in flags()) {
        let p = s.params;
        refunds_match(&scenario::gcra(p), TokenBucketModel::new(p), &s, &r)?;
    }

    #[test]
    fn leaky_bucket_refunds_match_its_model(
        s in scenario(),
        r in flags(),
        nodelay in any::<bool>(),
    ) {
        let p = s.params;
        refunds_match(
            &scenario::leaky_bucket(p, nodelay),
            LeakyBucketModel::new(p, nodelay),
            &s,
            &r,
        )?;
    }

    #[test]
    fn fixed_window_refunds_match_its_model(s in scenario(), r in flags()) {
        let p = s.params;
        refunds_match(&scenario::fixed_window(p), FixedWindowModel::new(p), &s, &r)?;
    }

    #[test]
    fn sliding_log_refunds_match_its_model(s in scenario(), r in flags()) {
        let p = s.params;
        refunds_match(&scenario::sliding_log(p), SlidingLogModel::new(p), &s, &r)?;
    }

    #[test]
    fn sliding_window_refunds_match_its_model(s in scenario(), r in flags()) {
        let p = s.params;
        refunds_match(&scenario::sliding_window(p), SlidingWindowModel::new(p), &s, &r)?;
    }
}
