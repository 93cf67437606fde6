//! Runs that settle costs after the fact: random sequences of checks,
//! debits (`Algorithm::debit`) and refunds on a simulated clock.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice_core::Decision;

use super::Params;
use super::scenario::{Advance, CostPick, SimClock, Step, advance, cost, params};

/// An amount to debit or refund, relative to the burst.
#[derive(Debug, Clone, Copy)]
pub enum Amount {
    /// Nothing.
    Zero,
    /// One unit.
    One,
    /// Exactly the burst.
    Burst,
    /// Anything in `0..=3 * burst + 1`.
    Any(u64),
    /// `u64::MAX`.
    Huge,
}

/// The most debt a debit may leave, relative to the burst.
#[derive(Debug, Clone, Copy)]
pub enum DebtLimit {
    /// No debt at all: only what is left is charged.
    Zero,
    /// Anything in `0..=3 * burst`.
    Any(u64),
    /// `u64::MAX`, as far as the state can hold; `3 * burst` for a
    /// [`Amount::Huge`] debit, whose debt would otherwise reach what the
    /// states can hold, where each algorithm stops at a different bound
    /// (see `absurd_amounts` in `debt_rules.rs`).
    Unbounded,
}

/// One step: a check, a debit or a refund.
#[derive(Debug, Clone, Copy)]
pub enum Op {
    /// A request of some cost, committed when admitted.
    Check(CostPick),
    /// Cost charged whatever is left.
    Debit(Amount, DebtLimit),
    /// Cost given back.
    Refund(Amount),
}

/// A limit, whether its window algorithms forgive debt at the window's end,
/// a start time and a sequence of steps.
#[derive(Debug, Clone)]
pub struct Run {
    /// The limit.
    pub params: Params,
    /// Debt forgiven at the window's end (window algorithms only).
    pub forgive: bool,
    /// The simulated clock's first reading.
    pub start: u64,
    /// Each step moves the clock, then does one thing.
    pub steps: Vec<(Advance, Op)>,
}

/// A step as it happens on the clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Did {
    /// A request of `cost` (above the burst: an error, nothing changes).
    Check(u64),
    /// A debit of `amount` with at most `max_debt` of debt.
    Debit {
        /// The amount charged whatever is left.
        amount: u64,
        /// The most debt it may leave.
        max_debt: u64,
    },
    /// A refund of the amount.
    Refund(u64),
}

fn amount() -> impl Strategy<Value = Amount> {
    prop_oneof![
        1 => Just(Amount::Zero),
        2 => Just(Amount::One),
        2 => Just(Amount::Burst),
        5 => any::<u64>().prop_map(Amount::Any),
        1 => Just(Amount::Huge),
    ]
}

fn debt_limit() -> impl Strategy<Value = DebtLimit> {
    prop_oneof![
        2 => Just(DebtLimit::Zero),
        5 => any::<u64>().prop_map(DebtLimit::Any),
        2 => Just(DebtLimit::Unbounded),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => cost().prop_map(Op::Check),
        3 => (amount(), debt_limit()).prop_map(|(a, d)| Op::Debit(a, d)),
        2 => amount().prop_map(Op::Refund),
    ]
}

/// Random runs: the limits and clock moves of `scenario`, about half the
/// steps checks, a third debits, a fifth refunds.
pub fn run() -> impl Strategy<Value = Run> {
    let start = prop_oneof![
        Just(0u64),
        0u64..=1_000_000_000_000,
        1_700_000_000_000_000_000u64..=2_500_000_000_000_000_000,
    ];
    let steps = prop::collection::vec((advance(false), op()), 1..40);
    (params(), any::<bool>(), start, steps).prop_map(|(params, forgive, start, steps)| Run {
        params,
        forgive,
        start,
        steps,
    })
}

impl Run {
    fn amount(&self, a: Amount) -> u64 {
        let b = self.params.burst;
        match a {
            Amount::Zero => 0,
            Amount::One => 1,
            Amount::Burst => b,
            Amount::Any(n) => n % (3 * b + 2),
            Amount::Huge => u64::MAX,
        }
    }

    fn max_debt(&self, d: DebtLimit, amount: u64) -> u64 {
        let b = self.params.burst;
        match d {
            DebtLimit::Zero => 0,
            DebtLimit::Any(n) => n % (3 * b + 1),
            DebtLimit::Unbounded if amount == u64::MAX => 3 * b,
            DebtLimit::Unbounded => u64::MAX,
        }
    }

    /// Walks the run: for each step, its index, the clock reading and what
    /// it does. `each` returns the decision the step saw (a check's, or a
    /// peek after a debit or a refund), on whose `retry_after` or
    /// `reset_after` a later step may land.
    pub fn walk(
        &self,
        mut each: impl FnMut(usize, u64, Did) -> Result<Option<Decision>, TestCaseError>,
    ) -> Result<(), TestCaseError> {
        let mut clock = SimClock::new(self.params, self.start);
        for (i, (advance, op)) in self.steps.iter().enumerate() {
            let cost = match op {
                Op::Check(cost) => *cost,
                _ => CostPick::Zero,
            };
            let (now, cost) = clock.next(&Step {
                advance: *advance,
                cost,
            });
            let did = match *op {
                Op::Check(_) => Did::Check(cost),
                Op::Debit(a, d) => {
                    let amount = self.amount(a);
                    let max_debt = self.max_debt(d, amount);
                    Did::Debit { amount, max_debt }
                }
                Op::Refund(a) => Did::Refund(self.amount(a)),
            };
            if let Some(decision) = each(i, now, did)? {
                clock.saw(decision);
            }
        }
        Ok(())
    }
}

/// One property test per algorithm on generated runs, each calling
/// `check(&algorithm, model, &run)` with the algorithm's reference model
/// (the window algorithms forgiving debt as the run says, the leaky bucket
/// with and without `nodelay`): the six test names, in the order token
/// bucket, GCRA, leaky bucket, fixed window, sliding log, sliding window.
macro_rules! per_algorithm_run {
    ($check:ident: $tb:ident, $gcra:ident, $lb:ident, $fw:ident, $log:ident, $sw:ident) => {
        proptest::proptest! {
            #![proptest_config($crate::common::scenario::config())]

            #[test]
            fn $tb(r in $crate::common::settlements::run()) {
                use $crate::common::{models::TokenBucketModel, scenario::token_bucket};
                $check(&token_bucket(r.params), TokenBucketModel::new(r.params), &r)?;
            }

            #[test]
            fn $gcra(r in $crate::common::settlements::run()) {
                use $crate::common::{models::TokenBucketModel, scenario::gcra};
                $check(&gcra(r.params), TokenBucketModel::new(r.params), &r)?;
            }

            #[test]
            fn $lb(
                r in $crate::common::settlements::run(),
                nodelay in proptest::prelude::any::<bool>(),
            ) {
                use $crate::common::{models::LeakyBucketModel, scenario::leaky_bucket};
                let model = LeakyBucketModel::new(r.params, nodelay);
                $check(&leaky_bucket(r.params, nodelay), model, &r)?;
            }

            #[test]
            fn $fw(r in $crate::common::settlements::run()) {
                use $crate::common::{models::FixedWindowModel, scenario::fixed_window};
                let alg = fixed_window(r.params).with_debt_forgiven(r.forgive);
                $check(&alg, FixedWindowModel::with_forgive(r.params, r.forgive), &r)?;
            }

            #[test]
            fn $log(r in $crate::common::settlements::run()) {
                use $crate::common::{models::SlidingLogModel, scenario::sliding_log};
                let alg = sliding_log(r.params).with_debt_forgiven(r.forgive);
                $check(&alg, SlidingLogModel::with_forgive(r.params, r.forgive), &r)?;
            }

            #[test]
            fn $sw(r in $crate::common::settlements::run()) {
                use $crate::common::{models::SlidingWindowModel, scenario::sliding_window};
                let alg = sliding_window(r.params).with_debt_forgiven(r.forgive);
                $check(&alg, SlidingWindowModel::with_forgive(r.params, r.forgive), &r)?;
            }
        }
    };
}
pub(crate) use per_algorithm_run;
