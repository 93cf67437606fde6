//! The rules of debt (`Algorithm::debit`), on random runs of checks,
//! debits and refunds (`common::settlements`):
//!
//! * nothing passes while the key is in debt (the reference model says
//!   when): every check is refused, a peek too, with `remaining` 0;
//! * the waits are promises: after a debt as everywhere else, a refused
//!   request of any cost up to the burst retried after exactly its
//!   `retry_after` passes, and 1 ns earlier it does not; the limit is full
//!   at `reset_after`, and not 1 ns earlier;
//! * `idle_at` is never before the debt is paid off: it is exactly when a
//!   peek says the limit is full again, and from then on the key decides as
//!   a fresh one would, so a store that forgets it there forgets no debt.

use crate::common;

use common::models::Model;
use common::settlements::{Did, Run, per_algorithm_run};
use proptest::prelude::*;
use sluice_core::{Algorithm, Decision};

/// Applies a step to the engine's state (and, when given, the model);
/// returns the decision the step saw: the check's, or a peek's after a
/// debit or a refund.
fn step<A: Algorithm, M: Model>(
    alg: &A,
    state: &mut A::State,
    model: Option<&mut M>,
    now: u64,
    did: Did,
) -> Option<Decision> {
    match did {
        Did::Check(cost) => {
            let outcome = alg.check(state, now, cost).ok()?;
            if let Some(update) = outcome.update {
                alg.apply(state, update);
                if let Some(model) = model {
                    model.admit(now, cost);
                }
            }
            return Some(outcome.decision);
        }
        Did::Debit { amount, max_debt } => {
            alg.debit(state, now, amount, max_debt);
            if let Some(model) = model {
                model.debit(now, amount, max_debt);
            }
        }
        Did::Refund(amount) => {
            alg.refund(state, now, amount);
            if let Some(model) = model {
                model.refund(now, amount);
            }
        }
    }
    Some(peek(alg, state, now))
}

fn peek<A: Algorithm>(alg: &A, state: &A::State, now: u64) -> Decision {
    alg.check(state, now, 0).expect("a peek").decision
}

fn admits_nothing_in_debt<A: Algorithm, M: Model>(
    alg: &A,
    mut model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let burst = run.params.burst;
    let mut state = A::State::default();
    run.walk(|i, now, did| {
        if model.in_debt(now) {
            for cost in [0, 1, burst] {
                let d = alg.check(&state, now, cost).expect("a possible cost");
                let ctx = format!("step {i} at {now}, cost {cost}, model {model:?}");
                prop_assert!(!d.decision.allowed, "admitted in debt: {}", ctx);
                prop_assert_eq!(d.decision.remaining, 0, "{}", ctx);
                prop_assert!(d.decision.retry_after > Some(0), "{}", ctx);
            }
        }
        Ok(step(alg, &mut state, Some(&mut model), now, did))
    })
}

per_algorithm_run!(admits_nothing_in_debt: token_bucket_admits_nothing_in_debt, gcra_admits_nothing_in_debt, leaky_bucket_admits_nothing_in_debt, fixed_window_admits_nothing_in_debt, sliding_log_admits_nothing_in_debt, sliding_window_admits_nothing_in_debt);

/// A refused `cost` at `now` passes after exactly its `retry_after`, not
/// 1 ns earlier; the limit is full after exactly `reset_after`.
fn waits_are_exact<A: Algorithm>(
    alg: &A,
    state: &A::State,
    now: u64,
    cost: u64,
    burst: u64,
) -> Result<(), TestCaseError> {
    let d = alg
        .check(state, now, cost)
        .expect("a possible cost")
        .decision;
    let ctx = format!("cost {cost} at {now}: {d:?}");
    let full_at = now + d.reset_after;
    if !d.allowed {
        prop_assert_eq!(peek(alg, state, full_at).remaining, burst, "{}", ctx);
        if d.reset_after > 0 {
            prop_assert!(peek(alg, state, full_at - 1).remaining < burst, "{}", ctx);
        }
    }
    match d.retry_after {
        None => prop_assert!(d.allowed, "{}", ctx),
        Some(wait) => {
            prop_assert!(!d.allowed && wait > 0, "{}", ctx);
            let again = alg.check(state, now + wait, cost).expect("a possible cost");
            prop_assert!(again.decision.allowed, "retry refused: {}", ctx);
            let early = alg
                .check(state, now + wait - 1, cost)
                .expect("a possible cost");
            prop_assert!(!early.decision.allowed, "not tight: {}", ctx);
        }
    }
    Ok(())
}

fn waits_out_debt_exactly<A: Algorithm, M: Model>(
    alg: &A,
    _model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let burst = run.params.burst;
    let mut state = A::State::default();
    run.walk(|_, now, did| {
        if let Did::Check(cost) = did
            && cost <= burst
        {
            waits_are_exact(alg, &state, now, cost, burst)?;
        }
        let seen = step::<A, M>(alg, &mut state, None, now, did);
        if !matches!(did, Did::Check(_)) {
            for cost in [0, 1, burst] {
                waits_are_exact(alg, &state, now, cost, burst)?;
            }
        }
        Ok(seen)
    })
}

per_algorithm_run!(waits_out_debt_exactly: token_bucket_waits_out_debt_exactly, gcra_waits_out_debt_exactly, leaky_bucket_waits_out_debt_exactly, fixed_window_waits_out_debt_exactly, sliding_log_waits_out_debt_exactly, sliding_window_waits_out_debt_exactly);

fn is_not_idle_before_its_debt_is_paid<A: Algorithm, M: Model>(
    alg: &A,
    _model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let p = run.params;
    let fresh = A::State::default();
    let mut state = A::State::default();
    run.walk(|i, now, did| {
        let seen = step::<A, M>(alg, &mut state, None, now, did);
        let idle = alg.idle_at(&state);
        let d = peek(alg, &state, now);
        let ctx = format!("step {i}: {did:?} at {now}, idle at {idle}, peek {d:?}");
        if let Some(paid_in) = d.retry_after {
            prop_assert!(idle >= now + paid_in, "idle in debt: {}", ctx);
        }
        if d.reset_after > 0 {
            prop_assert_eq!(idle, now + d.reset_after, "{}", ctx);
        } else {
            prop_assert!(idle <= now, "{}", ctx);
        }
        let from = idle.max(now);
        for at in [
            from,
            from + 1,
            from + p.interval_ceil(),
            from + 3 * p.window_ceil(),
        ] {
            for cost in [0, 1, p.burst] {
                let kept = alg.check(&state, at, cost).expect("a possible cost");
                let forgot = alg.check(&fresh, at, cost).expect("a possible cost");
                prop_assert_eq!(kept.decision, forgot.decision, "at {}: {}", at, ctx);
            }
        }
        Ok(seen)
    })
}

per_algorithm_run!(is_not_idle_before_its_debt_is_paid: token_bucket_is_not_idle_before_its_debt_is_paid, gcra_is_not_idle_before_its_debt_is_paid, leaky_bucket_is_not_idle_before_its_debt_is_paid, fixed_window_is_not_idle_before_its_debt_is_paid, sliding_log_is_not_idle_before_its_debt_is_paid, sliding_window_is_not_idle_before_its_debt_is_paid);
