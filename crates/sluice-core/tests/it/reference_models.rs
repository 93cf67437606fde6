//! Each engine against its slow reference model (`common::models`): on random
//! limits and random request sequences on a simulated clock, every field of
//! every decision must be equal, with no tolerance.
//!
//! Exact equality is possible because both sides are exact: the engines use
//! scaled integers, the models fractions over a fixed denominator, and every
//! duration is the exact real-valued time rounded up to the nanosecond (the
//! models find it by searching whole nanoseconds).
//!
//! Also checked at every step: a cost above the burst is an error and changes
//! nothing; refusals and peeks return no update; an admitted request of
//! positive cost returns one.

use crate::common;

use common::Params;
use common::models::{
    FixedWindowModel, LeakyBucketModel, Model, SlidingLogModel, SlidingWindowModel,
    TokenBucketModel, decide,
};
use common::scenario::{self, Scenario, config, drive, scenario};
use proptest::prelude::*;
use sluice_core::{Algorithm, CheckError};

/// Drives the engine and the model side by side through the scenario.
fn matches_model<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    scenario: &Scenario,
) -> Result<(), TestCaseError> {
    let Params { burst, .. } = scenario.params;
    prop_assert_eq!(alg.capacity(), burst);
    let mut step = 0;
    drive(alg, scenario, |event| {
        step += 1;
        let (now, cost) = (event.now, event.cost);
        match event.result {
            Err(error) => {
                prop_assert!(cost > burst, "step {}: unexpected {:?}", step, error);
                prop_assert_eq!(
                    *error,
                    CheckError::CostExceedsCapacity {
                        cost,
                        capacity: burst
                    }
                );
            }
            Ok(outcome) => {
                prop_assert!(cost <= burst, "step {}: cost {} accepted", step, cost);
                let expected = decide(&model, now, cost);
                prop_assert_eq!(
                    outcome.decision,
                    expected,
                    "step {}: now {} cost {}, model {:?}",
                    step,
                    now,
                    cost,
                    model
                );
                prop_assert_eq!(
                    outcome.update.is_some(),
                    expected.allowed && cost > 0,
                    "step {}: only an admitted request with a cost changes state",
                    step
                );
                if expected.allowed && cost > 0 {
                    model.admit(now, cost);
                }
            }
        }
        Ok(())
    })?;
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_bucket_matches_its_model(s in scenario()) {
        let p = s.params;
        matches_model(&scenario::token_bucket(p), TokenBucketModel::new(p), &s)?;
    }

    #[test]
    fn gcra_matches_the_token_bucket_model(s in scenario()) {
        let p = s.params;
        matches_model(&scenario::gcra(p), TokenBucketModel::new(p), &s)?;
    }

    #[test]
    fn leaky_bucket_matches_its_model(s in scenario(), nodelay in any::<bool>()) {
        let p = s.params;
        matches_model(
            &scenario::leaky_bucket(p, nodelay),
            LeakyBucketModel::new(p, nodelay),
            &s,
        )?;
    }

    #[test]
    fn fixed_window_matches_its_model(s in scenario()) {
        let p = s.params;
        matches_model(&scenario::fixed_window(p), FixedWindowModel::new(p), &s)?;
    }

    #[test]
    fn sliding_log_matches_its_model(s in scenario()) {
        let p = s.params;
        matches_model(&scenario::sliding_log(p), SlidingLogModel::new(p), &s)?;
    }

    #[test]
    fn sliding_window_matches_its_model(s in scenario()) {
        let p = s.params;
        matches_model(&scenario::sliding_window(p), SlidingWindowModel::new(p), &s)?;
    }
}
