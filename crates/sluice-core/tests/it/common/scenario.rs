//! Random limits and request sequences on a simulated clock.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice_core::{
    Algorithm, CheckError, Decision, FixedWindow, Gcra, LeakyBucket, Outcome, SlidingLog,
    SlidingWindow, TokenBucket,
};

use super::{DAY, HOUR, MIN, MS, Params, SEC};

/// The proptest configuration of the property tests: 256 cases, enough to
/// hit the corners and few enough to keep the debug build fast. Set
/// `PROPTEST_CASES` for a deeper run (e.g. `PROPTEST_CASES=100000 cargo test
/// --release -p sluice-core`).
pub fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(256);
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

/// How far the simulated clock moves before a request.
#[derive(Debug, Clone, Copy)]
pub enum Advance {
    /// Not at all: several requests in the same nanosecond.
    Stay,
    /// A few nanoseconds.
    Nanos(u64),
    /// A fraction of the emission interval, in thousandths.
    Intervals(u64),
    /// A fraction of the window `burst / rate`, in thousandths.
    Windows(u64),
    /// A jump of any size up to about four months.
    Jump(u64),
    /// The last decision's `retry_after` (its `reset_after` if it was
    /// allowed), plus -1, 0 or 1 ns: lands exactly on the boundaries.
    Boundary(i8),
    /// Backwards, by a fraction of the window in thousandths (only in the
    /// scenarios about a clock that steps back).
    Back(u64),
}

/// The cost of a request, relative to the burst.
#[derive(Debug, Clone, Copy)]
pub enum CostPick {
    /// A peek.
    Zero,
    /// One unit.
    One,
    /// Exactly the burst.
    Burst,
    /// One more than the burst: always an error.
    Over,
    /// Anything in `0..=burst + 1`.
    Any(u64),
}

/// One request: move the clock, then ask for some cost.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// How the clock moves first.
    pub advance: Advance,
    /// What the request costs.
    pub cost: CostPick,
}

/// A limit, a start time and a sequence of requests.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The limit.
    pub params: Params,
    /// The simulated clock's first reading.
    pub start: u64,
    /// The requests, in order.
    pub steps: Vec<Step>,
}

/// Rates: any amount from 1 to 1000 over a common period (most of them
/// non-divisible: 7 per 250 ms, 3/s, 997/h, ...), odd periods, and a few
/// named ones.
pub fn params() -> impl Strategy<Value = Params> {
    let period = prop_oneof![
        Just(MS),
        Just(250 * MS),
        Just(SEC),
        Just(MIN),
        Just(HOUR),
        Just(DAY),
        1u64..=10 * SEC,
    ];
    let named = prop_oneof![
        Just((3, SEC)),
        Just((7, 250 * MS)),
        Just((1, DAY)),
        Just((1000, SEC)),
        Just((999, 1000)),
    ];
    let rate = prop_oneof![4 => (1u64..=1000, period), 1 => named];
    (rate, 1u64..=50).prop_map(|((amount, period), burst)| Params::new(amount, period, burst))
}

/// How the clock moves before a step; `back` lets it step back.
pub fn advance(back: bool) -> BoxedStrategy<Advance> {
    let forward = prop_oneof![
        3 => Just(Advance::Stay),
        1 => (1u64..=3).prop_map(Advance::Nanos),
        4 => (0u64..=3000).prop_map(Advance::Intervals),
        2 => (0u64..=3000).prop_map(Advance::Windows),
        1 => (0u64..=10_000_000_000_000_000).prop_map(Advance::Jump),
        3 => (-1i8..=1).prop_map(Advance::Boundary),
    ];
    if back {
        prop_oneof![4 => forward, 1 => (0u64..=3000).prop_map(Advance::Back)].boxed()
    } else {
        forward.boxed()
    }
}

/// The cost of a request.
pub fn cost() -> impl Strategy<Value = CostPick> {
    prop_oneof![
        1 => Just(CostPick::Zero),
        4 => Just(CostPick::One),
        1 => Just(CostPick::Burst),
        1 => Just(CostPick::Over),
        4 => any::<u64>().prop_map(CostPick::Any),
    ]
}

fn scenario_with(back: bool) -> impl Strategy<Value = Scenario> {
    let start = prop_oneof![
        Just(0u64),
        0u64..=1_000_000_000_000,
        // Unix time in nanoseconds today and for decades to come.
        1_700_000_000_000_000_000u64..=2_500_000_000_000_000_000,
    ];
    let steps = prop::collection::vec(
        (advance(back), cost()).prop_map(|(advance, cost)| Step { advance, cost }),
        1..40,
    );
    (params(), start, steps).prop_map(|(params, start, steps)| Scenario {
        params,
        start,
        steps,
    })
}

/// A scenario on a clock that never runs backwards.
pub fn scenario() -> impl Strategy<Value = Scenario> {
    scenario_with(false)
}

/// A scenario on a clock that sometimes steps back.
pub fn scenario_with_backsteps() -> impl Strategy<Value = Scenario> {
    scenario_with(true)
}

/// The simulated clock of a scenario, which can land on the boundaries the
/// last decision announced.
#[derive(Debug, Clone)]
pub struct SimClock {
    p: Params,
    now: u64,
    last: Option<Decision>,
}

impl SimClock {
    /// A clock reading `start`.
    pub fn new(p: Params, start: u64) -> Self {
        Self {
            p,
            now: start,
            last: None,
        }
    }

    /// Moves the clock for `step`; returns the new reading and the cost.
    pub fn next(&mut self, step: &Step) -> (u64, u64) {
        let p = self.p;
        let scaled =
            |n: u64, k: u64| u64::try_from(u128::from(n) * u128::from(k) / 1000).expect("fits");
        self.now = match step.advance {
            Advance::Stay => self.now,
            Advance::Nanos(n) | Advance::Jump(n) => self.now + n,
            Advance::Intervals(k) => self.now + scaled(p.interval_ceil(), k),
            Advance::Windows(k) => self.now + scaled(p.window_ceil(), k),
            Advance::Boundary(delta) => {
                let d = self
                    .last
                    .map_or(0, |d| d.retry_after.unwrap_or(d.reset_after));
                // Never backwards: a boundary 0 ns away minus 1 stays put.
                (self.now + d)
                    .saturating_add_signed(delta.into())
                    .max(self.now)
            }
            Advance::Back(k) => self.now.saturating_sub(scaled(p.window_ceil(), k)),
        };
        let cost = match step.cost {
            CostPick::Zero => 0,
            CostPick::One => 1,
            CostPick::Burst => p.burst,
            CostPick::Over => p.burst + 1,
            CostPick::Any(n) => n % (p.burst + 2),
        };
        (self.now, cost)
    }

    /// Remembers a decision, for [`Advance::Boundary`].
    pub fn saw(&mut self, decision: Decision) {
        self.last = Some(decision);
    }
}

/// One request as the engine saw it.
pub struct Event<'a, A: Algorithm> {
    /// The clock reading.
    pub now: u64,
    /// The request's cost.
    pub cost: u64,
    /// The state the request was checked against.
    pub state: &'a A::State,
    /// What `check` answered.
    pub result: &'a Result<Outcome<A::Update>, CheckError>,
}

/// Runs a scenario through an engine, committing every update `check`
/// returns, and calls `on_step` before each commit.
pub fn drive<A: Algorithm>(
    alg: &A,
    scenario: &Scenario,
    mut on_step: impl FnMut(&Event<'_, A>) -> Result<(), TestCaseError>,
) -> Result<A::State, TestCaseError> {
    let mut clock = SimClock::new(scenario.params, scenario.start);
    let mut state = A::State::default();
    for step in &scenario.steps {
        let (now, cost) = clock.next(step);
        let result = alg.check(&state, now, cost);
        on_step(&Event {
            now,
            cost,
            state: &state,
            result: &result,
        })?;
        if let Ok(outcome) = result {
            clock.saw(outcome.decision);
            if let Some(update) = outcome.update {
                alg.apply(&mut state, update);
            }
        }
    }
    Ok(state)
}

/// The token bucket for `p`.
pub fn token_bucket(p: Params) -> TokenBucket {
    TokenBucket::new(p.rate(), p.burst).expect("valid limit")
}

/// GCRA for `p`.
pub fn gcra(p: Params) -> Gcra {
    Gcra::new(p.rate(), p.burst).expect("valid limit")
}

/// The leaky bucket for `p`.
pub fn leaky_bucket(p: Params, nodelay: bool) -> LeakyBucket {
    LeakyBucket::new(p.rate(), p.burst, nodelay).expect("valid limit")
}

/// The fixed window for `p`.
pub fn fixed_window(p: Params) -> FixedWindow {
    FixedWindow::new(p.rate(), p.burst).expect("valid limit")
}

/// The sliding log for `p`.
pub fn sliding_log(p: Params) -> SlidingLog {
    SlidingLog::new(p.rate(), p.burst).expect("valid limit")
}

/// The sliding-window counter for `p`.
pub fn sliding_window(p: Params) -> SlidingWindow {
    SlidingWindow::new(p.rate(), p.burst).expect("valid limit")
}

/// One property test per algorithm, each running `check(&algorithm,
/// &scenario)` on generated scenarios (the leaky bucket both with and
/// without `nodelay`): the six test names, in the order token bucket, GCRA,
/// leaky bucket, fixed window, sliding log, sliding window.
macro_rules! per_algorithm {
    ($check:ident: $tb:ident, $gcra:ident, $lb:ident, $fw:ident, $log:ident, $sw:ident) => {
        proptest::proptest! {
            #![proptest_config($crate::common::scenario::config())]

            #[test]
            fn $tb(s in $crate::common::scenario::scenario()) {
                $check(&$crate::common::scenario::token_bucket(s.params), &s)?;
            }

            #[test]
            fn $gcra(s in $crate::common::scenario::scenario()) {
                $check(&$crate::common::scenario::gcra(s.params), &s)?;
            }

            #[test]
            fn $lb(
                s in $crate::common::scenario::scenario(),
                nodelay in proptest::prelude::any::<bool>(),
            ) {
                $check(&$crate::common::scenario::leaky_bucket(s.params, nodelay), &s)?;
            }

            #[test]
            fn $fw(s in $crate::common::scenario::scenario()) {
                $check(&$crate::common::scenario::fixed_window(s.params), &s)?;
            }

            #[test]
            fn $log(s in $crate::common::scenario::scenario()) {
                $check(&$crate::common::scenario::sliding_log(s.params), &s)?;
            }

            #[test]
            fn $sw(s in $crate::common::scenario::scenario()) {
                $check(&$crate::common::scenario::sliding_window(s.params), &s)?;
            }
        }
    };
}
pub(crate) use per_algorithm;
