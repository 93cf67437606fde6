//! The contract every algorithm keeps.

use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::CheckError;

/// What one check found: the decision, and the state change to make if the
/// caller commits it.
///
/// `update` is `None` when the request was refused or cost nothing: refusals
/// and peeks never change state. Keeping the change separate from the
/// decision lets a store check several limits first and then commit all of
/// them or none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome<U> {
    /// The decision for this request.
    pub decision: Decision,
    /// The state change to apply when the request is committed.
    pub update: Option<U>,
}

/// What [`Algorithm::debit`] did with an amount: the part charged to the
/// limit (from what it had left, then as debt) and the part it could not
/// charge. `charged + excess` is always the amount asked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Debited {
    /// Cost charged: first what the limit had left, then debt up to
    /// `max_debt`.
    pub charged: u64,
    /// Cost not charged, because the debt would have passed `max_debt` (or
    /// what the state can hold). Never silently dropped: the caller records
    /// and reports it.
    pub excess: u64,
}

impl Debited {
    /// `charged` of `amount`, the rest excess (`charged <= amount`).
    pub(crate) fn of(amount: u64, charged: u64) -> Self {
        debug_assert!(charged <= amount);
        Self {
            charged,
            excess: amount - charged,
        }
    }
}

/// A rate-limiting algorithm: parameters only, no state, no clock, no I/O.
///
/// Per-key state lives in the caller (a store); time comes in as `now`.
/// Implementations use exact integer arithmetic, so the same inputs always
/// give the same decision.
pub trait Algorithm {
    /// Per-key state. `Default` is the state of a key never seen (full quota).
    type State: Default + Clone;
    /// A committed change to the state.
    type Update;

    /// The most cost the limit admits at once: its burst.
    fn capacity(&self) -> u64;

    /// Decides a request of `cost` at time `now` without changing anything.
    ///
    /// A cost of 0 peeks. A cost above [`capacity`](Self::capacity) is an
    /// error: it can never pass.
    fn check(
        &self,
        state: &Self::State,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<Self::Update>, CheckError>;

    /// Commits an update produced by [`check`](Self::check) on this state.
    fn apply(&self, state: &mut Self::State, update: Self::Update);

    /// Gives back `amount` of cost charged earlier, at time `now`: the limit
    /// is left as if that much had not been charged, as closely as its
    /// state can say, and never above full. It never refuses and never
    /// fails. Each algorithm says where the amount comes back from:
    ///
    /// - token bucket and GCRA: `amount` tokens, up to full;
    /// - leaky bucket: `amount` units of water drained at once;
    /// - fixed window: the current window's count (a cost charged in an
    ///   earlier window has already been given back by the window's end);
    /// - sliding window: the count of the latest window that admitted
    ///   anything, if it still weighs on the estimate;
    /// - sliding log: its debt, then the newest entries.
    ///
    /// A refund past what was charged leaves the limit full, not in credit.
    /// A key in debt is given its debt back first.
    fn refund(&self, state: &mut Self::State, now: Nanos, amount: u64);

    /// Charges `amount` at `now` whatever is left (cost settled after the
    /// request was admitted); never refuses, fails or panics. What the
    /// limit has left is used first, the rest puts the key into **debt**,
    /// up to `max_debt` units beyond empty (`u64::MAX`: as far as the state
    /// can hold); beyond that it is [`Debited::excess`], not charged, for
    /// the caller to record and report. A net refund is a
    /// [`refund`](Self::refund), not a debit.
    ///
    /// In debt, every check is refused (a peek too) with `remaining` 0, its
    /// `retry_after` and `reset_after` count the debt, and
    /// [`idle_at`](Self::idle_at) is not before it is paid off, at the
    /// limit's rate. Each algorithm states its rule (and the window ones can
    /// forgive debt at the window's end, `with_debt_forgiven`): see
    /// `docs/algorithms.md`, "Settlement and debt".
    fn debit(&self, state: &mut Self::State, now: Nanos, amount: u64, max_debt: u64) -> Debited;

    /// The time at which `state` will be fully replenished, so that a store
    /// may forget the key without changing any future decision. A key in
    /// debt is not idle before its debt is paid off.
    fn idle_at(&self, state: &Self::State) -> Nanos;

    /// Checks and, when the request is admitted, commits it in one step.
    fn check_and_apply(
        &self,
        state: &mut Self::State,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let outcome = self.check(state, now, cost)?;
        if let Some(update) = outcome.update {
            self.apply(state, update);
        }
        Ok(outcome.decision)
    }
}

/// Refuses a cost the limit can never admit.
#[inline]
pub(crate) fn ensure_possible(cost: u64, capacity: u64) -> Result<(), CheckError> {
    if cost > capacity {
        Err(CheckError::CostExceedsCapacity { cost, capacity })
    } else {
        Ok(())
    }
}
