//! One type for "any of the six algorithms", for stores and configs that pick
//! the algorithm at run time.

use crate::algorithm::{Algorithm, Debited, Outcome};
use crate::algorithms::bucket::BucketState;
use crate::algorithms::concurrency::ConcurrencyState;
use crate::algorithms::fixed_window::FixedWindowState;
use crate::algorithms::gcra::GcraState;
use crate::algorithms::sliding_log::{LogAppend, SlidingLogState};
use crate::algorithms::sliding_window::SlidingWindowState;
use crate::clock::Nanos;
use crate::error::{CheckError, LimitError};
use crate::rate::Rate;
use crate::{Concurrency, FixedWindow, Gcra, LeakyBucket, SlidingLog, SlidingWindow, TokenBucket};

/// The name of an algorithm, as written in configs (`snake_case`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum AlgorithmKind {
    /// [`FixedWindow`].
    FixedWindow,
    /// [`SlidingLog`].
    SlidingLog,
    /// [`SlidingWindow`].
    SlidingWindow,
    /// [`TokenBucket`] (the default).
    #[default]
    TokenBucket,
    /// [`LeakyBucket`].
    LeakyBucket,
    /// [`Gcra`].
    Gcra,
    /// [`Concurrency`]: requests in flight, not a rate. Not in
    /// [`ALL`](Self::ALL), the rate algorithms.
    Concurrency,
}

impl AlgorithmKind {
    /// Every rate algorithm, in declaration order ([`Concurrency`] has no
    /// rate, and is not one).
    ///
    /// [`Concurrency`]: Self::Concurrency
    pub const ALL: [AlgorithmKind; 6] = [
        Self::FixedWindow,
        Self::SlidingLog,
        Self::SlidingWindow,
        Self::TokenBucket,
        Self::LeakyBucket,
        Self::Gcra,
    ];

    /// The config name of the algorithm.
    pub fn name(&self) -> &'static str {
        match self {
            Self::FixedWindow => "fixed_window",
            Self::SlidingLog => "sliding_log",
            Self::SlidingWindow => "sliding_window",
            Self::TokenBucket => "token_bucket",
            Self::LeakyBucket => "leaky_bucket",
            Self::Gcra => "gcra",
            Self::Concurrency => "concurrency",
        }
    }
}

/// Everything that defines a limit's behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LimitSpec {
    /// Which algorithm.
    pub algorithm: AlgorithmKind,
    /// The long-run rate.
    pub rate: Rate,
    /// The most cost admitted at once from idle.
    pub burst: u64,
    /// Leaky bucket only: admit without delay.
    pub nodelay: bool,
}

impl LimitSpec {
    /// Builds the limiter, checking the parameters.
    pub fn build(&self) -> Result<Limiter, LimitError> {
        Limiter::new(self)
    }

    /// The time, in nanoseconds, for an empty limit to fully replenish:
    /// `burst` emission intervals (rounded up). Windowed algorithms use this
    /// as their window length.
    pub fn window(&self) -> Nanos {
        // In 64 bits where the product fits (every realistic limit), which
        // spares a 128-bit division on the response path.
        if let Some(w) = self.burst.checked_mul(self.rate.period()) {
            return w.div_ceil(self.rate.amount());
        }
        let w = u128::from(self.burst) * u128::from(self.rate.period());
        let a = u128::from(self.rate.amount());
        u64::try_from(w.div_ceil(a)).unwrap_or(u64::MAX)
    }

    /// One instance's share of this limit when `n` instances enforce it
    /// each on its own (a shared store's local fallback): rate and burst
    /// divided by `n`, the burst rounded up and at least 1, so the window
    /// stays the same.
    ///
    /// ```
    /// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    /// let spec = LimitSpec {
    ///     algorithm: AlgorithmKind::TokenBucket,
    ///     rate: Rate::per_second(100),
    ///     burst: 300,
    ///     nodelay: false,
    /// };
    /// let share = spec.share(4);
    /// assert_eq!(share.burst, 75);
    /// assert_eq!(share.window(), spec.window());
    /// assert_eq!(spec.share(1), spec);
    /// ```
    pub fn share(&self, n: u32) -> LimitSpec {
        let n64 = u64::from(n.max(1));
        let rate = self
            .rate
            .period()
            .checked_mul(n64)
            .and_then(|p| Rate::new(self.rate.amount(), p))
            .unwrap_or(self.rate);
        LimitSpec {
            rate,
            burst: self.burst.div_ceil(n64).max(1),
            ..*self
        }
    }
}

/// Any of the six algorithms, chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limiter {
    /// A fixed window.
    FixedWindow(FixedWindow),
    /// A sliding-window log.
    SlidingLog(SlidingLog),
    /// A sliding-window counter.
    SlidingWindow(SlidingWindow),
    /// A token bucket.
    TokenBucket(TokenBucket),
    /// A leaky bucket.
    LeakyBucket(LeakyBucket),
    /// GCRA.
    Gcra(Gcra),
    /// Requests in flight.
    Concurrency(Concurrency),
}

/// Per-key state of any algorithm. [`State::Fresh`] is a key never seen.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum State {
    /// No state yet: a full, idle limit.
    #[default]
    Fresh,
    /// Fixed window state.
    FixedWindow(FixedWindowState),
    /// Sliding log state (boxed: it grows with the burst).
    SlidingLog(Box<SlidingLogState>),
    /// Sliding window counter state.
    SlidingWindow(SlidingWindowState),
    /// Token or leaky bucket state.
    Bucket(BucketState),
    /// GCRA state.
    Gcra(GcraState),
    /// Slots held.
    Concurrency(ConcurrencyState),
}

/// A state change of any algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Update {
    /// Replace a fixed window state.
    FixedWindow(FixedWindowState),
    /// Append to a sliding log.
    SlidingLog(LogAppend),
    /// Replace a sliding window state.
    SlidingWindow(SlidingWindowState),
    /// Replace a bucket state.
    Bucket(BucketState),
    /// Replace a GCRA state.
    Gcra(GcraState),
    /// Replace the slots held.
    Concurrency(ConcurrencyState),
}

macro_rules! dispatch_check {
    ($alg:expr, $state:expr, $variant:ident, $update:ident, $now:expr, $cost:expr) => {{
        let fresh = Default::default();
        let s = match $state {
            State::$variant(s) => s,
            _ => &fresh,
        };
        let o = $alg.check(s, $now, $cost)?;
        Ok(Outcome {
            decision: o.decision,
            update: o.update.map(Update::$update),
        })
    }};
}

impl Limiter {
    /// Builds the limiter a spec describes.
    pub fn new(spec: &LimitSpec) -> Result<Self, LimitError> {
        let (rate, burst) = (spec.rate, spec.burst);
        Ok(match spec.algorithm {
            AlgorithmKind::FixedWindow => Self::FixedWindow(FixedWindow::new(rate, burst)?),
            AlgorithmKind::SlidingLog => Self::SlidingLog(SlidingLog::new(rate, burst)?),
            AlgorithmKind::SlidingWindow => Self::SlidingWindow(SlidingWindow::new(rate, burst)?),
            AlgorithmKind::TokenBucket => Self::TokenBucket(TokenBucket::new(rate, burst)?),
            AlgorithmKind::LeakyBucket => {
                Self::LeakyBucket(LeakyBucket::new(rate, burst, spec.nodelay)?)
            }
            AlgorithmKind::Gcra => Self::Gcra(Gcra::new(rate, burst)?),
            AlgorithmKind::Concurrency => Self::Concurrency(Concurrency::from_rate(rate, burst)?),
        })
    }

    /// The rate, reduced to lowest terms: `a` units of cost per `p`
    /// nanoseconds (for `10/s`, `(1, 100_000_000)`).
    pub fn reduced_rate(&self) -> (u64, u64) {
        match self {
            Self::FixedWindow(l) => l.reduced_rate(),
            Self::SlidingLog(l) => l.reduced_rate(),
            Self::SlidingWindow(l) => l.reduced_rate(),
            Self::TokenBucket(l) => l.reduced_rate(),
            Self::LeakyBucket(l) => l.reduced_rate(),
            Self::Gcra(l) => l.reduced_rate(),
            Self::Concurrency(l) => l.reduced_rate(),
        }
    }

    /// The same limiter with debt ([`Algorithm::debit`]) forgiven at the
    /// window reset (`true`) or carried on (`false`, the default): see
    /// [`FixedWindow::with_debt_forgiven`], [`SlidingWindow::with_debt_forgiven`]
    /// and [`SlidingLog::with_debt_forgiven`]. The bucket algorithms and
    /// GCRA have no reset: for them it changes nothing.
    pub fn with_debt_forgiven(self, forgiven: bool) -> Self {
        match self {
            Self::FixedWindow(l) => Self::FixedWindow(l.with_debt_forgiven(forgiven)),
            Self::SlidingLog(l) => Self::SlidingLog(l.with_debt_forgiven(forgiven)),
            Self::SlidingWindow(l) => Self::SlidingWindow(l.with_debt_forgiven(forgiven)),
            other => other,
        }
    }

    /// Whether debt is forgiven at the window reset (always `false` for the
    /// bucket algorithms and GCRA); see [`with_debt_forgiven`](Self::with_debt_forgiven).
    pub fn debt_forgiven(&self) -> bool {
        match self {
            Self::FixedWindow(l) => l.debt_forgiven(),
            Self::SlidingLog(l) => l.debt_forgiven(),
            Self::SlidingWindow(l) => l.debt_forgiven(),
            _ => false,
        }
    }

    /// The most cost admitted at once (the burst).
    pub fn capacity(&self) -> u64 {
        match self {
            Self::FixedWindow(a) => a.capacity(),
            Self::SlidingLog(a) => a.capacity(),
            Self::SlidingWindow(a) => a.capacity(),
            Self::TokenBucket(a) => a.capacity(),
            Self::LeakyBucket(a) => a.capacity(),
            Self::Gcra(a) => a.capacity(),
            Self::Concurrency(a) => a.capacity(),
        }
    }

    /// Decides without changing anything; see [`Algorithm::check`]. A state
    /// of another algorithm is treated as fresh.
    #[inline]
    pub fn check(
        &self,
        state: &State,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<Update>, CheckError> {
        match self {
            Self::FixedWindow(a) => dispatch_check!(a, state, FixedWindow, FixedWindow, now, cost),
            Self::SlidingWindow(a) => {
                dispatch_check!(a, state, SlidingWindow, SlidingWindow, now, cost)
            }
            Self::TokenBucket(a) => dispatch_check!(a, state, Bucket, Bucket, now, cost),
            Self::LeakyBucket(a) => dispatch_check!(a, state, Bucket, Bucket, now, cost),
            Self::Gcra(a) => dispatch_check!(a, state, Gcra, Gcra, now, cost),
            Self::Concurrency(a) => {
                dispatch_check!(a, state, Concurrency, Concurrency, now, cost)
            }
            Self::SlidingLog(a) => {
                let fresh = SlidingLogState::default();
                let s = match state {
                    State::SlidingLog(s) => s,
                    _ => &fresh,
                };
                let o = a.check(s, now, cost)?;
                Ok(Outcome {
                    decision: o.decision,
                    update: o.update.map(Update::SlidingLog),
                })
            }
        }
    }

    /// Commits an update from [`check`](Self::check).
    #[inline]
    pub fn apply(&self, state: &mut State, update: Update) {
        match (self, update) {
            (Self::SlidingLog(a), Update::SlidingLog(u)) => {
                if let State::SlidingLog(s) = state {
                    a.apply(s, u);
                } else {
                    let mut s = Box::<SlidingLogState>::default();
                    a.apply(&mut s, u);
                    *state = State::SlidingLog(s);
                }
            }
            (Self::Gcra(a), Update::Gcra(u)) => {
                if let State::Gcra(s) = state {
                    a.apply(s, u);
                } else {
                    *state = State::Gcra(u);
                }
            }
            (_, Update::FixedWindow(u)) => *state = State::FixedWindow(u),
            (_, Update::SlidingWindow(u)) => *state = State::SlidingWindow(u),
            (_, Update::Bucket(u)) => *state = State::Bucket(u),
            (_, Update::Concurrency(u)) => *state = State::Concurrency(u),
            // An update from another limiter: nothing sensible to do.
            _ => {}
        }
    }

    /// When `state` is fully replenished; see [`Algorithm::idle_at`].
    pub fn idle_at(&self, state: &State) -> Nanos {
        match (self, state) {
            (Self::FixedWindow(a), State::FixedWindow(s)) => a.idle_at(s),
            (Self::SlidingLog(a), State::SlidingLog(s)) => a.idle_at(s),
            (Self::SlidingWindow(a), State::SlidingWindow(s)) => a.idle_at(s),
            (Self::TokenBucket(a), State::Bucket(s)) => a.idle_at(s),
            (Self::LeakyBucket(a), State::Bucket(s)) => a.idle_at(s),
            (Self::Gcra(a), State::Gcra(s)) => a.idle_at(s),
            (Self::Concurrency(a), State::Concurrency(s)) => a.idle_at(s),
            _ => 0,
        }
    }

    /// Gives back `amount` of cost charged earlier (see
    /// [`Algorithm::refund`]). A fresh state, or one of another algorithm,
    /// is full already and stays as it is.
    pub fn refund(&self, state: &mut State, now: Nanos, amount: u64) {
        match (self, state) {
            (Self::FixedWindow(a), State::FixedWindow(s)) => a.refund(s, now, amount),
            (Self::SlidingLog(a), State::SlidingLog(s)) => a.refund(s, now, amount),
            (Self::SlidingWindow(a), State::SlidingWindow(s)) => a.refund(s, now, amount),
            (Self::TokenBucket(a), State::Bucket(s)) => a.refund(s, now, amount),
            (Self::LeakyBucket(a), State::Bucket(s)) => a.refund(s, now, amount),
            (Self::Gcra(a), State::Gcra(s)) => a.refund(s, now, amount),
            (Self::Concurrency(a), State::Concurrency(s)) => a.refund(s, now, amount),
            _ => {}
        }
    }

    /// Charges `amount` whatever is left, into debt up to `max_debt` (see
    /// [`Algorithm::debit`]). A fresh state, or one of another algorithm,
    /// is first replaced by this algorithm's fresh state (only if something
    /// is charged).
    pub fn debit(&self, state: &mut State, now: Nanos, amount: u64, max_debt: u64) -> Debited {
        let (t, a, d) = (now, amount, max_debt);
        match self {
            Self::FixedWindow(l) => debit_in(l, state, as_fixed, State::FixedWindow, t, a, d),
            Self::SlidingLog(l) => {
                let wrap = |s| State::SlidingLog(Box::new(s));
                debit_in(l, state, as_log, wrap, t, a, d)
            }
            Self::SlidingWindow(l) => debit_in(l, state, as_sliding, State::SlidingWindow, t, a, d),
            Self::TokenBucket(l) => debit_in(l, state, as_bucket, State::Bucket, t, a, d),
            Self::LeakyBucket(l) => debit_in(l, state, as_bucket, State::Bucket, t, a, d),
            Self::Gcra(l) => debit_in(l, state, as_gcra, State::Gcra, t, a, d),
            Self::Concurrency(l) => debit_in(l, state, as_slots, State::Concurrency, t, a, d),
        }
    }

    /// Checks and commits in one step.
    pub fn check_and_apply(
        &self,
        state: &mut State,
        now: Nanos,
        cost: u64,
    ) -> Result<crate::Decision, CheckError> {
        let o = self.check(state, now, cost)?;
        if let Some(u) = o.update {
            self.apply(state, u);
        }
        Ok(o.decision)
    }
}

/// [`Algorithm::debit`] on the state `get` finds in `slot`, or on a fresh
/// one that `wrap` puts in its place when something is charged.
fn debit_in<A: Algorithm>(
    alg: &A,
    slot: &mut State,
    get: fn(&mut State) -> Option<&mut A::State>,
    wrap: impl FnOnce(A::State) -> State,
    now: Nanos,
    amount: u64,
    max_debt: u64,
) -> Debited {
    if let Some(s) = get(slot) {
        return alg.debit(s, now, amount, max_debt);
    }
    let mut fresh = A::State::default();
    let debited = alg.debit(&mut fresh, now, amount, max_debt);
    if debited.charged > 0 {
        *slot = wrap(fresh);
    }
    debited
}

fn as_fixed(s: &mut State) -> Option<&mut FixedWindowState> {
    match s {
        State::FixedWindow(s) => Some(s),
        _ => None,
    }
}

fn as_log(s: &mut State) -> Option<&mut SlidingLogState> {
    match s {
        State::SlidingLog(s) => Some(s),
        _ => None,
    }
}

fn as_sliding(s: &mut State) -> Option<&mut SlidingWindowState> {
    match s {
        State::SlidingWindow(s) => Some(s),
        _ => None,
    }
}

fn as_bucket(s: &mut State) -> Option<&mut BucketState> {
    match s {
        State::Bucket(s) => Some(s),
        _ => None,
    }
}

fn as_slots(s: &mut State) -> Option<&mut ConcurrencyState> {
    match s {
        State::Concurrency(s) => Some(s),
        _ => None,
    }
}

fn as_gcra(s: &mut State) -> Option<&mut GcraState> {
    match s {
        State::Gcra(s) => Some(s),
        _ => None,
    }
}

#[cfg(test)]
mod reduced_rate_tests {
    use super::*;
    use crate::{AlgorithmKind, Rate};

    /// A new algorithm fails to compile here until it is placed, and then
    /// fails the test until `ALL` lists it.
    #[test]
    fn all_lists_every_algorithm_once() {
        let index = |k: AlgorithmKind| match k {
            AlgorithmKind::FixedWindow => 0,
            AlgorithmKind::SlidingLog => 1,
            AlgorithmKind::SlidingWindow => 2,
            AlgorithmKind::TokenBucket => 3,
            AlgorithmKind::LeakyBucket => 4,
            AlgorithmKind::Gcra => 5,
            // Not a rate algorithm: not in `ALL`.
            AlgorithmKind::Concurrency => usize::MAX,
        };
        for (i, k) in AlgorithmKind::ALL.into_iter().enumerate() {
            assert_eq!(index(k), i, "{k:?}");
        }
    }

    #[test]
    fn debt_is_forgiven_only_where_windows_reset() {
        for algorithm in AlgorithmKind::ALL {
            let spec = LimitSpec {
                algorithm,
                rate: Rate::per_second(10),
                burst: 10,
                nodelay: false,
            };
            let plain = Limiter::new(&spec).unwrap_or_else(|e| panic!("{e}"));
            assert!(!plain.debt_forgiven(), "{algorithm:?}");
            let forgiven = plain.with_debt_forgiven(true);
            let windowed = matches!(
                algorithm,
                AlgorithmKind::FixedWindow
                    | AlgorithmKind::SlidingWindow
                    | AlgorithmKind::SlidingLog
            );
            assert_eq!(forgiven.debt_forgiven(), windowed, "{algorithm:?}");
            assert_eq!(forgiven == plain, !windowed, "{algorithm:?}");
            assert_eq!(forgiven.with_debt_forgiven(false), plain, "{algorithm:?}");
        }
    }

    #[test]
    fn every_algorithm_reports_its_reduced_rate() {
        for algorithm in AlgorithmKind::ALL {
            for (rate, expected) in [
                ("10/s", (1, 100_000_000)),
                ("3/s", (3, 1_000_000_000)),
                ("100/min", (1, 600_000_000)),
                ("3 per 7s", (3, 7_000_000_000)),
            ] {
                let spec = LimitSpec {
                    algorithm,
                    rate: rate.parse::<Rate>().unwrap_or(Rate::per_second(1)),
                    burst: 7,
                    nodelay: false,
                };
                let l = Limiter::new(&spec).map(|l| l.reduced_rate());
                assert_eq!(l, Ok(expected), "{algorithm:?} {rate}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn window_is_burst_intervals_rounded_up(
            amount in 1u64..=u64::MAX,
            period in 1u64..=u64::MAX,
            burst in 0u64..=u64::MAX,
        ) {
            let spec = LimitSpec {
                algorithm: AlgorithmKind::Gcra,
                rate: Rate::new(amount, period).unwrap(),
                burst,
                nodelay: false,
            };
            let exact = (u128::from(burst) * u128::from(period)).div_ceil(u128::from(amount));
            prop_assert_eq!(u128::from(spec.window()), exact.min(u128::from(u64::MAX)));
        }
    }
}
