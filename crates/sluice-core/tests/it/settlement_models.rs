//! Debits against the reference models: on random limits and runs of
//! checks, debits (`Algorithm::debit`) and refunds on a simulated clock,
//! every decision equals the model's field by field, every debit charges
//! and returns as excess what the model does, and the state each debit or
//! refund leaves (read by a peek) decides as the model's does. The window
//! algorithms run with debt carried or forgiven at the window's end.

use crate::common;

use common::models::{Model, decide};
use common::settlements::{Did, Run, per_algorithm_run};
use proptest::prelude::*;
use sluice_core::{Algorithm, Debited};

fn debits_match<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let burst = run.params.burst;
    let mut state = A::State::default();
    let peek = |state: &A::State, now| alg.check(state, now, 0).expect("a peek").decision;
    run.walk(|i, now, did| {
        let ctx = format!("step {i}: {did:?} at {now}, model {model:?}");
        match did {
            Did::Check(cost) if cost > burst => {
                prop_assert!(alg.check(&state, now, cost).is_err(), "{}", ctx);
                Ok(None)
            }
            Did::Check(cost) => {
                let outcome = alg.check(&state, now, cost).expect("a possible cost");
                prop_assert_eq!(outcome.decision, decide(&model, now, cost), "{}", ctx);
                let changes = outcome.decision.allowed && cost > 0;
                prop_assert_eq!(outcome.update.is_some(), changes, "{}", ctx);
                if let Some(update) = outcome.update {
                    alg.apply(&mut state, update);
                    model.admit(now, cost);
                }
                Ok(Some(outcome.decision))
            }
            Did::Debit { amount, max_debt } => {
                let debited = alg.debit(&mut state, now, amount, max_debt);
                let excess = model.debit(now, amount, max_debt);
                let expected = Debited {
                    charged: amount - excess,
                    excess,
                };
                prop_assert_eq!(debited, expected, "{}", ctx);
                let seen = peek(&state, now);
                prop_assert_eq!(seen, decide(&model, now, 0), "{} (after)", ctx);
                Ok(Some(seen))
            }
            Did::Refund(amount) => {
                alg.refund(&mut state, now, amount);
                model.refund(now, amount);
                let seen = peek(&state, now);
                prop_assert_eq!(seen, decide(&model, now, 0), "{} (after)", ctx);
                Ok(Some(seen))
            }
        }
    })
}

per_algorithm_run!(debits_match: token_bucket_debits_match_its_model, gcra_debits_match_the_token_bucket_model, leaky_bucket_debits_match_its_model, fixed_window_debits_match_its_model, sliding_log_debits_match_its_model, sliding_window_debits_match_its_model);
