//! How much passes when costs are settled after the fact, whatever the
//! clients do, on random runs of checks, debits and refunds. "What the
//! limit allows" is, over a span of `T` ns (both ends included),
//! `B + floor(T * rate)` for every algorithm but the fixed window, and `B`
//! per aligned window for the fixed window (see `admission_bounds.rs`).
//!
//! * Debits: over any span, the cost admitted plus the cost charged by
//!   debits is at most what the limit allows plus the most debt the run
//!   could have left (unless debt is forgiven, which is not paid off); the
//!   cost admitted alone, at most what it allows.
//! * Refunds (each followed by a greedy client that takes all it can at
//!   once): over any span, the cost admitted is at most what the limit
//!   allows plus what was refunded within the span (a refund gives back no
//!   more than its amount), and from any refund on it is at most what the
//!   limit allows plus what later refunds gave back (a refund never leaves
//!   the key above full).

use crate::common;

use common::Params;
use common::models::Model;
use common::settlements::{Did, Run, per_algorithm_run};
use proptest::prelude::*;
use sluice_core::{
    Algorithm, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket,
};

/// Which allowance an algorithm keeps.
trait Allowance {
    /// Per aligned window (the fixed window), rather than the bucket bound.
    const ALIGNED: bool = false;

    /// Whether debt is forgiven rather than paid off at the rate.
    fn forgives(&self) -> bool {
        false
    }
}

impl Allowance for TokenBucket {}
impl Allowance for Gcra {}
impl Allowance for LeakyBucket {}
impl Allowance for SlidingLog {
    fn forgives(&self) -> bool {
        self.debt_forgiven()
    }
}
impl Allowance for SlidingWindow {
    fn forgives(&self) -> bool {
        self.debt_forgiven()
    }
}
impl Allowance for FixedWindow {
    const ALIGNED: bool = true;

    fn forgives(&self) -> bool {
        self.debt_forgiven()
    }
}

/// A cost at a time.
type Cost = (u64, u64);

/// Costs at times.
type Costs = Vec<Cost>;

fn sum(costs: &[(u64, u64)], keep: impl Fn(u64) -> bool) -> u128 {
    costs
        .iter()
        .filter(|(t, _)| keep(*t))
        .map(|(_, c)| u128::from(*c))
        .sum()
}

/// Every span holds at most the allowance, plus `extra`, plus the credits
/// within it: the spans between two of the costs' times, or for the fixed
/// window the runs of aligned windows between two of them.
fn within<A: Allowance>(
    p: Params,
    costs: &[(u64, u64)],
    credits: &[(u64, u64)],
    extra: u128,
) -> Result<(), TestCaseError> {
    // Costs at the same time as one (a greedy client takes many).
    let merge = |costs: &[(u64, u64)]| -> Vec<(u64, u64)> {
        let mut by_time = std::collections::BTreeMap::<u64, u64>::new();
        for &(t, c) in costs {
            let total = by_time.entry(t).or_default();
            *total = total.saturating_add(c);
        }
        by_time.into_iter().collect()
    };
    let (costs, credits) = (&merge(costs)[..], &merge(credits)[..]);
    for &(from, _) in costs {
        for &(to, _) in costs.iter().filter(|(t, _)| *t >= from) {
            let (n, bound) = if A::ALIGNED {
                let (i, j) = (p.window_of(from), p.window_of(to));
                let keep = |t: u64| (i..=j).contains(&p.window_of(t));
                let bound = u128::from(j - i + 1) * u128::from(p.burst) + sum(credits, keep);
                (sum(costs, keep), bound)
            } else {
                let keep = |t: u64| (from..=to).contains(&t);
                (
                    sum(costs, keep),
                    p.bucket_bound(to - from) + sum(credits, keep),
                )
            };
            prop_assert!(
                n <= bound + extra,
                "{} in [{}, {}], allowed {} + {}",
                n,
                from,
                to,
                bound,
                extra
            );
        }
    }
    Ok(())
}

fn admits_at_most_its_allowance_plus_debt<A: Algorithm + Allowance, M: Model>(
    alg: &A,
    _model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let mut state = A::State::default();
    let (mut admitted, mut charged) = (Costs::new(), Costs::new());
    // The most debt the run could have left: the largest `max_debt`, and no
    // more than all the debits charged.
    let (mut debited, mut most_debt) = (0u64, 0u64);
    run.walk(|_, now, did| match did {
        Did::Check(cost) => {
            let Ok(outcome) = alg.check(&state, now, cost) else {
                return Ok(None);
            };
            if let Some(update) = outcome.update {
                alg.apply(&mut state, update);
                admitted.push((now, cost));
            }
            Ok(Some(outcome.decision))
        }
        Did::Debit { amount, max_debt } => {
            let d = alg.debit(&mut state, now, amount, max_debt);
            charged.push((now, d.charged));
            debited = debited.saturating_add(d.charged);
            most_debt = most_debt.max(max_debt.min(debited));
            Ok(alg.check(&state, now, 0).ok().map(|o| o.decision))
        }
        // Refunds give back: see the next test.
        Did::Refund(_) => Ok(None),
    })?;
    within::<A>(run.params, &admitted, &[], 0)?;
    if alg.forgives() {
        // Forgiven debt is not paid off: only what is admitted is bounded.
        return Ok(());
    }
    let mut both = admitted;
    both.extend(charged);
    within::<A>(run.params, &both, &[], u128::from(most_debt))
}

per_algorithm_run!(admits_at_most_its_allowance_plus_debt: token_bucket_admits_at_most_its_allowance_plus_debt, gcra_admits_at_most_its_allowance_plus_debt, leaky_bucket_admits_at_most_its_allowance_plus_debt, fixed_window_admits_at_most_its_allowance_plus_debt, sliding_log_admits_at_most_its_allowance_plus_debt, sliding_window_admits_at_most_its_allowance_plus_debt);

fn refunds_never_leave_the_key_above_full<A: Algorithm + Allowance, M: Model>(
    alg: &A,
    _model: M,
    run: &Run,
) -> Result<(), TestCaseError> {
    let mut state = A::State::default();
    // Per step: what it admitted or what it refunded.
    let mut steps: Vec<(Option<Cost>, Option<Cost>)> = Vec::new();
    run.walk(|_, now, did| {
        let decision = match did {
            Did::Check(cost) => alg.check(&state, now, cost).ok().map(|outcome| {
                if let Some(update) = outcome.update {
                    alg.apply(&mut state, update);
                    steps.push((Some((now, cost)), None));
                }
                outcome.decision
            }),
            Did::Debit { amount, max_debt } => {
                alg.debit(&mut state, now, amount, max_debt);
                None
            }
            Did::Refund(amount) => {
                alg.refund(&mut state, now, amount);
                steps.push((None, Some((now, amount))));
                // A greedy client then takes all it can at once.
                for _ in 0..2 * run.params.burst + 2 {
                    let taken = alg.check(&state, now, 1).expect("a possible cost");
                    let Some(update) = taken.update else {
                        break;
                    };
                    alg.apply(&mut state, update);
                    steps.push((Some((now, 1)), None));
                }
                None
            }
        };
        Ok(decision.or_else(|| alg.check(&state, now, 0).ok().map(|o| o.decision)))
    })?;
    let admitted = |from: usize| -> Costs { steps[from..].iter().filter_map(|s| s.0).collect() };
    let refunded = |from: usize| -> Costs { steps[from..].iter().filter_map(|s| s.1).collect() };
    within::<A>(run.params, &admitted(0), &refunded(0), 0)?;
    for (k, _) in steps.iter().enumerate().filter(|(_, s)| s.1.is_some()) {
        within::<A>(run.params, &admitted(k + 1), &refunded(k + 1), 0)?;
    }
    Ok(())
}

per_algorithm_run!(refunds_never_leave_the_key_above_full: token_bucket_refunds_never_leave_the_key_above_full, gcra_refunds_never_leave_the_key_above_full, leaky_bucket_refunds_never_leave_the_key_above_full, fixed_window_refunds_never_leave_the_key_above_full, sliding_log_refunds_never_leave_the_key_above_full, sliding_window_refunds_never_leave_the_key_above_full);
