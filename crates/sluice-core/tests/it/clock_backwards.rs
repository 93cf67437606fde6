//! A clock that steps back never admits extra.
//!
//! A state only remembers the times of admitted requests, so "the latest
//! reading" below is the latest reading at which a request with a cost was
//! admitted (refusals and peeks change nothing). On a reading `now` earlier
//! than that, each engine is compared with *itself standing still*: the same
//! state checked at the latest reading instead. Then:
//!
//! * whatever passes at `now` also passes standing still, and no more is
//!   free at `now` than standing still (never admits extra);
//! * an admitted request leaves exactly the state it would have left standing
//!   still, so once the clock is back at the latest reading every decision is
//!   as if it had stood still.
//!
//! The token and leaky buckets, the sliding log and the fixed window stand
//! exactly still (same `allowed` and `remaining`; the buckets and the log
//! also the same durations). GCRA, which keeps no time of its own, and the
//! sliding-window counter, which stands still at the start of its window,
//! are stricter while the clock is behind.

use crate::common;

use std::fmt::Debug;

use common::scenario::{self, Scenario, SimClock, config, scenario_with_backsteps};
use proptest::prelude::*;
use sluice_core::Algorithm;

/// How closely an engine stands still.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StandsStill {
    /// The whole decision equals the standing-still one.
    Exactly,
    /// `allowed` and `remaining` equal it; durations may differ.
    SameVerdict,
    /// Only ever stricter.
    Stricter,
}

fn never_admits_extra<A>(alg: &A, s: &Scenario, how: StandsStill) -> Result<(), TestCaseError>
where
    A: Algorithm,
    A::State: PartialEq + Debug,
{
    let mut clock = SimClock::new(s.params, s.start);
    let mut state = A::State::default();
    let mut latest: Option<u64> = None;
    for (i, step) in s.steps.iter().enumerate() {
        let (now, cost) = clock.next(step);
        let still_at = latest.map_or(now, |l| l.max(now));

        let mut moved = state.clone();
        let got = alg.check_and_apply(&mut moved, now, cost);
        let mut still = state.clone();
        let standing = alg.check_and_apply(&mut still, still_at, cost);

        let (got, standing) = match (got, standing) {
            (Err(a), Err(b)) => {
                prop_assert_eq!(a, b);
                prop_assert_eq!(&moved, &state, "an error changed the state");
                continue;
            }
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                return Err(TestCaseError::fail(format!("step {i}: {a:?} vs {b:?}")));
            }
        };
        clock.saw(got);
        let ctx = format!("step {i}: now {now}, latest {latest:?}, cost {cost}");
        match how {
            StandsStill::Exactly => prop_assert_eq!(got, standing, "{}", ctx),
            StandsStill::SameVerdict => {
                prop_assert_eq!(got.allowed, standing.allowed, "{}", ctx);
                prop_assert_eq!(got.remaining, standing.remaining, "{}", ctx);
            }
            StandsStill::Stricter => {
                prop_assert!(!got.allowed || standing.allowed, "admitted extra: {}", ctx);
                if got.allowed == standing.allowed {
                    prop_assert!(got.remaining <= standing.remaining, "{}", ctx);
                }
                let peek = |at| alg.check(&state, at, 0).expect("peek").decision.remaining;
                prop_assert!(peek(now) <= peek(still_at), "more free: {}", ctx);
            }
        }
        if got.allowed && cost > 0 {
            prop_assert_eq!(
                &moved,
                &still,
                "the state differs from standing still: {}",
                ctx
            );
            latest = Some(still_at);
        } else {
            prop_assert_eq!(&moved, &state, "a refusal or a peek changed the state");
        }
        state = moved;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_bucket_stands_still(s in scenario_with_backsteps()) {
        never_admits_extra(&scenario::token_bucket(s.params), &s, StandsStill::Exactly)?;
    }

    #[test]
    fn leaky_bucket_stands_still(s in scenario_with_backsteps(), nodelay in any::<bool>()) {
        let lb = scenario::leaky_bucket(s.params, nodelay);
        never_admits_extra(&lb, &s, StandsStill::Exactly)?;
    }

    #[test]
    fn sliding_log_stands_still(s in scenario_with_backsteps()) {
        never_admits_extra(&scenario::sliding_log(s.params), &s, StandsStill::Exactly)?;
    }

    #[test]
    fn fixed_window_stands_still(s in scenario_with_backsteps()) {
        never_admits_extra(&scenario::fixed_window(s.params), &s, StandsStill::SameVerdict)?;
    }

    #[test]
    fn gcra_is_stricter_while_behind(s in scenario_with_backsteps()) {
        never_admits_extra(&scenario::gcra(s.params), &s, StandsStill::Stricter)?;
    }

    #[test]
    fn sliding_window_is_stricter_while_behind(s in scenario_with_backsteps()) {
        never_admits_extra(&scenario::sliding_window(s.params), &s, StandsStill::Stricter)?;
    }
}
