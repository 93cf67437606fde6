//! Edge cases, one per test, on a simulated clock (plain nanosecond numbers).
//!
//! Most tests run every algorithm through [`Limiter`], the run-time choice of
//! algorithm, whose [`State`] can be compared before and after a request.

use crate::common;

use common::{DAY, HOUR, MS, SEC};
use sluice_core::algorithms::bucket::BucketState;
use sluice_core::algorithms::fixed_window::FixedWindowState;
use sluice_core::algorithms::gcra::GcraState;
use sluice_core::algorithms::sliding_log::MAX_LOG_BURST;
use sluice_core::algorithms::sliding_window::SlidingWindowState;
use sluice_core::{
    Algorithm, AlgorithmKind, CheckError, Decision, FixedWindow, Gcra, LeakyBucket, LimitError,
    LimitSpec, Limiter, Rate, SlidingLog, SlidingWindow, State, TokenBucket,
};

use AlgorithmKind::{
    FixedWindow as Fixed, Gcra as G, LeakyBucket as Leaky, SlidingLog as Log,
    SlidingWindow as Sliding, TokenBucket as Token,
};

const ALL: [AlgorithmKind; 6] = [Fixed, Log, Sliding, Token, Leaky, G];

fn limiter(kind: AlgorithmKind, rate: Rate, burst: u64) -> Limiter {
    LimitSpec {
        algorithm: kind,
        rate,
        burst,
        nodelay: false,
    }
    .build()
    .expect("valid limit")
}

/// Checks and commits; panics on an error.
fn take(l: &Limiter, state: &mut State, now: u64, cost: u64) -> Decision {
    l.check_and_apply(state, now, cost).expect("possible cost")
}

/// A peek, which must not change the state.
fn peek(l: &Limiter, state: &State, now: u64) -> Decision {
    let outcome = l.check(state, now, 0).expect("a peek is always possible");
    assert_eq!(outcome.update, None, "a peek returned an update");
    outcome.decision
}

#[test]
fn a_peek_on_a_fresh_key_reports_a_full_limit() {
    for kind in ALL {
        let l = limiter(kind, Rate::per_second(5), 5);
        for now in [0, 1, 1_800_000_000_000_000_000] {
            assert_eq!(peek(&l, &State::Fresh, now), Decision::full(5), "{kind:?}");
        }
    }
}

#[test]
fn a_peek_reports_the_state_and_changes_nothing() {
    let t = 100 * SEC + 250 * MS;
    for kind in ALL {
        let l = limiter(kind, Rate::per_second(5), 5);
        let mut state = State::Fresh;
        let taken = take(&l, &mut state, t, 3);
        let before = state.clone();

        let d = peek(&l, &state, t);
        assert!(d.allowed, "{kind:?}");
        assert_eq!(d.remaining, 2, "{kind:?}");
        assert_eq!(d.reset_after, taken.reset_after, "{kind:?}");
        assert_eq!(d.retry_after, None, "{kind:?}");
        // Through `check_and_apply` too: nothing is committed.
        assert_eq!(take(&l, &mut state, t, 0), d, "{kind:?}");
        assert_eq!(state, before, "{kind:?}");

        // The next request still sees all three units used.
        assert_eq!(take(&l, &mut state, t, 2).remaining, 0, "{kind:?}");
        // A peek on an exhausted limit is still allowed: it costs nothing.
        let d = peek(&l, &state, t);
        assert!(d.allowed && d.remaining == 0, "{kind:?}: {d:?}");
    }
}

#[test]
fn a_cost_equal_to_the_burst_passes_from_idle_then_waits_for_a_full_limit() {
    // 5/s with a burst of 5: W = 1 s; windows [100 s, 101 s), [101 s, 102 s).
    let t = 100 * SEC + 250 * MS;
    let cases = [
        // The first request's reset_after, the second's retry_after.
        (Token, SEC, SEC),
        (G, SEC, SEC),
        (Leaky, SEC, SEC),
        (Log, SEC, SEC),
        // The count resets at the end of the window, 101 s.
        (Fixed, 750 * MS, 750 * MS),
        // The count still weighs on the next window, until 102 s.
        (Sliding, 1750 * MS, 1750 * MS),
    ];
    for (kind, reset, retry) in cases {
        let l = limiter(kind, Rate::per_second(5), 5);
        let mut state = State::Fresh;
        let d = take(&l, &mut state, t, 5);
        assert!(d.allowed, "{kind:?}");
        assert_eq!(
            (d.remaining, d.reset_after, d.delay),
            (0, reset, 0),
            "{kind:?}"
        );

        let d = take(&l, &mut state, t, 5);
        assert!(!d.allowed, "{kind:?}");
        assert_eq!(d.retry_after, Some(retry), "{kind:?}");
        assert!(!take(&l, &mut state, t + retry - 1, 5).allowed, "{kind:?}");
        assert!(take(&l, &mut state, t + retry, 5).allowed, "{kind:?}");
    }
}

#[test]
fn a_cost_above_the_burst_is_an_error_and_changes_nothing() {
    for kind in ALL {
        let l = limiter(kind, Rate::per_second(5), 5);
        let mut used = State::Fresh;
        take(&l, &mut used, 7 * SEC, 2);
        for state in [State::Fresh, used] {
            for cost in [6, 1_000, u64::MAX] {
                let error = CheckError::CostExceedsCapacity { cost, capacity: 5 };
                assert_eq!(l.check(&state, 7 * SEC, cost), Err(error), "{kind:?}");
                let mut after = state.clone();
                assert_eq!(l.check_and_apply(&mut after, 7 * SEC, cost), Err(error));
                assert_eq!(after, state, "{kind:?}: the state changed");
            }
        }
    }
}

#[test]
fn one_per_day() {
    // 6 h into a day (about 2024): a window is one day.
    let t = 20_000 * DAY + 6 * HOUR;
    let cases = [
        (Token, DAY),
        (G, DAY),
        (Leaky, DAY),
        (Log, DAY),
        // The end of the day.
        (Fixed, 18 * HOUR),
        // A burst of 1 counted today weighs on tomorrow too: the end of
        // tomorrow.
        (Sliding, 42 * HOUR),
    ];
    let one_per_day = Rate::new(1, DAY).expect("valid rate");
    for (kind, wait) in cases {
        let l = limiter(kind, one_per_day, 1);
        let mut state = State::Fresh;
        let d = take(&l, &mut state, t, 1);
        assert!(d.allowed, "{kind:?}");
        assert_eq!(d.reset_after, wait, "{kind:?}");
        let d = take(&l, &mut state, t + 1, 1);
        assert_eq!(d.retry_after, Some(wait - 1), "{kind:?}");
        assert!(!take(&l, &mut state, t + wait - 1, 1).allowed, "{kind:?}");
        assert!(take(&l, &mut state, t + wait, 1).allowed, "{kind:?}");
    }
}

#[test]
fn a_million_per_second_on_the_buckets() {
    let t = 1_800_000_000 * SEC;
    for kind in [Token, G, Leaky] {
        let l = limiter(kind, Rate::per_second(1_000_000), 1_000_000);
        let mut state = State::Fresh;
        let d = take(&l, &mut state, t, 1_000_000);
        assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 0, SEC));
        // Then one every microsecond, exactly.
        for k in 1..=1_000 {
            let now = t + k * 1_000;
            let early = take(&l, &mut state, now - 1, 1);
            assert_eq!(early.retry_after, Some(1), "{kind:?} at {k}");
            let d = take(&l, &mut state, now, 1);
            assert!(d.allowed && d.remaining == 0, "{kind:?} at {k}");
            let d = take(&l, &mut state, now, 1);
            assert_eq!(d.retry_after, Some(1_000), "{kind:?} at {k}");
        }
    }
}

#[test]
fn a_million_per_second_on_the_windows() {
    // W = 1 s for a burst of a million.
    let t = 1_800_000_000 * SEC;
    for (kind, wait) in [(Fixed, SEC), (Sliding, 2 * SEC)] {
        let l = limiter(kind, Rate::per_second(1_000_000), 1_000_000);
        let mut state = State::Fresh;
        assert!(take(&l, &mut state, t, 1_000_000).allowed, "{kind:?}");
        let d = take(&l, &mut state, t + 1, 1_000_000);
        assert_eq!(d.retry_after, Some(wait - 1), "{kind:?}");
        assert!(
            take(&l, &mut state, t + wait, 1_000_000).allowed,
            "{kind:?}"
        );
    }

    // The sliding log at its largest burst: W = 10 ms.
    let log = SlidingLog::new(Rate::per_second(1_000_000), MAX_LOG_BURST).expect("valid");
    let mut state = Default::default();
    for k in 0..1_000 {
        let d = log
            .check_and_apply(&mut state, t + k * 1_000, 10)
            .expect("cost 10");
        assert!(d.allowed, "request {k}");
    }
    assert_eq!(state.len(), 1_000);
    // The first entry (cost 10) leaves the window at t + 10 ms.
    for cost in [1, 10] {
        let d = log.check(&state, t + MS, cost).expect("possible").decision;
        assert_eq!(d.retry_after, Some(9 * MS), "cost {cost}");
    }
    let d = log.check(&state, t + MS, 11).expect("possible").decision;
    assert_eq!(d.retry_after, Some(9 * MS + 1_000));
}

#[test]
fn the_sliding_log_is_capped_at_max_log_burst() {
    assert_eq!(MAX_LOG_BURST, 10_000);
    let rate = Rate::per_second(MAX_LOG_BURST); // W = 1 s
    assert_eq!(
        SlidingLog::new(rate, MAX_LOG_BURST + 1),
        Err(LimitError::BurstTooLarge {
            burst: MAX_LOG_BURST + 1,
            max: MAX_LOG_BURST
        })
    );
    assert_eq!(SlidingLog::new(rate, 0), Err(LimitError::ZeroBurst));

    // A full log at the cap: one entry per admitted request at a distinct
    // nanosecond, never more than the burst.
    let log = SlidingLog::new(rate, MAX_LOG_BURST).expect("at the cap");
    let t = 1_800_000_000 * SEC;
    let mut state = Default::default();
    for k in 0..MAX_LOG_BURST {
        assert!(
            log.check_and_apply(&mut state, t + k, 1)
                .expect("cost 1")
                .allowed
        );
    }
    assert_eq!(state.len() as u64, MAX_LOG_BURST);
    let d = log
        .check_and_apply(&mut state, t + MAX_LOG_BURST, 1)
        .expect("cost 1");
    assert!(!d.allowed);
    assert_eq!(d.retry_after, Some(SEC - MAX_LOG_BURST));
    // Entries that left the window are dropped when the next one is added.
    assert!(
        log.check_and_apply(&mut state, t + SEC, 1)
            .expect("cost 1")
            .allowed
    );
    assert_eq!(state.len() as u64, MAX_LOG_BURST);
}

#[test]
fn every_algorithm_rejects_a_zero_burst() {
    let rate = Rate::per_second(10);
    for kind in ALL {
        let spec = LimitSpec {
            algorithm: kind,
            rate,
            burst: 0,
            nodelay: false,
        };
        assert_eq!(spec.build(), Err(LimitError::ZeroBurst), "{kind:?}");
    }
    assert_eq!(TokenBucket::new(rate, 0), Err(LimitError::ZeroBurst));
    assert_eq!(Gcra::new(rate, 0), Err(LimitError::ZeroBurst));
    assert_eq!(LeakyBucket::new(rate, 0, true), Err(LimitError::ZeroBurst));
    assert_eq!(FixedWindow::new(rate, 0), Err(LimitError::ZeroBurst));
    assert_eq!(SlidingWindow::new(rate, 0), Err(LimitError::ZeroBurst));
}

#[test]
fn window_counters_reject_bursts_beyond_32_bits() {
    let rate = Rate::per_second(1_000_000_000);
    let max = u64::from(u32::MAX);
    let error = LimitError::BurstTooLarge {
        burst: max + 1,
        max,
    };
    assert_eq!(FixedWindow::new(rate, max + 1), Err(error.clone()));
    assert_eq!(SlidingWindow::new(rate, max + 1), Err(error));
    assert!(FixedWindow::new(rate, max).is_ok());
    assert!(SlidingWindow::new(rate, max).is_ok());
    // The buckets have no such cap.
    assert!(TokenBucket::new(rate, max + 1).is_ok());
}

#[test]
fn limits_spanning_more_than_500_years_are_rejected() {
    let one_per_day = Rate::new(1, DAY).expect("valid rate");
    let burst = 200_000; // 548 years
    for kind in ALL {
        let spec = LimitSpec {
            algorithm: kind,
            rate: one_per_day,
            burst,
            nodelay: false,
        };
        let expected = if kind == Log {
            LimitError::BurstTooLarge {
                burst,
                max: MAX_LOG_BURST,
            }
        } else {
            LimitError::TooLong { burst }
        };
        assert_eq!(spec.build(), Err(expected), "{kind:?}");
    }
}

/// Regression: when a bucket's scaled capacity is above half of `u64`, a
/// refused request overflowed `level + need` in the meter: a panic wherever
/// overflow checks are on (debug builds). Release builds wrapped back to the
/// right value.
#[test]
fn long_limits_near_the_500_year_cap_do_not_overflow() {
    let one_per_day = Rate::new(1, DAY).expect("valid rate");
    let burst = 150_000; // 411 years
    let t = 20_000 * DAY;
    for kind in [Token, G, Leaky, Fixed, Sliding] {
        let l = limiter(kind, one_per_day, burst);
        let mut state = State::Fresh;
        assert!(take(&l, &mut state, t, burst).allowed, "{kind:?}");
        let d = take(&l, &mut state, t, burst);
        assert!(!d.allowed, "{kind:?}");
        let window = burst * DAY;
        let expected = match kind {
            // The first window, [0, W), ends at W.
            Fixed => window - t,
            // The counter weighs on the next window too, which ends past
            // the nanoseconds a u64 holds: the duration saturates.
            Sliding => u64::MAX,
            _ => window,
        };
        assert_eq!(d.retry_after, Some(expected), "{kind:?}");
        assert_eq!(d.reset_after, expected, "{kind:?}");
    }
}

#[test]
fn a_clock_stepping_back_never_admits_extra() {
    // 4/s, burst 4: W = 1 s; T is 300 ms into the window [100 s, 101 s).
    let t = 100 * SEC + 300 * MS;
    for kind in ALL {
        let l = limiter(kind, Rate::per_second(4), 4);

        // Exhausted at T: nothing passes earlier, however far back.
        let mut state = State::Fresh;
        assert!(take(&l, &mut state, t, 4).allowed);
        let exhausted = state.clone();
        for back in [t - 1, t - 200 * MS, t - SEC, 1, 0] {
            assert!(!take(&l, &mut state, back, 1).allowed, "{kind:?} at {back}");
            assert_eq!(state, exhausted, "{kind:?}: a refusal changed the state");
        }
        assert_eq!(peek(&l, &state, t).remaining, 0, "{kind:?}");
    }

    // Half used at T, then three requests from a clock that stepped back.
    // Standing still at T, two of them would pass; none may pass beyond that.
    // GCRA keeps no time of its own and is stricter while the clock is behind.
    for (back, gcra_admits) in [(200 * MS, 1), (SEC, 0)] {
        for kind in ALL {
            let l = limiter(kind, Rate::per_second(4), 4);
            let mut state = State::Fresh;
            take(&l, &mut state, t, 2);
            let admitted = (0..3)
                .filter(|_| take(&l, &mut state, t - back, 1).allowed)
                .count();
            let expected = if kind == G { gcra_admits } else { 2 };
            assert_eq!(admitted, expected, "{kind:?} stepping back {back} ns");

            // Back at T, it is as if the clock had stood still at T.
            let mut still = State::Fresh;
            take(&l, &mut still, t, 2);
            for _ in 0..admitted {
                assert!(take(&l, &mut still, t, 1).allowed);
            }
            assert_eq!(state, still, "{kind:?}");
            for k in 0..30 {
                let now = t + k * 100 * MS;
                let cost = k % 3;
                assert_eq!(
                    take(&l, &mut state, now, cost),
                    take(&l, &mut still, now, cost),
                    "{kind:?} at step {k}"
                );
            }
        }
    }
}

#[test]
fn the_fixed_window_admits_twice_the_burst_across_a_boundary() {
    // 10 per minute, burst 10: windows are whole minutes. A client that
    // spends the burst in the last nanosecond of one window and again in
    // the first of the next passes 20 requests within 1 ns. Only the fixed
    // window allows that; it is the price of its 16-byte state.
    let boundary = 60 * SEC;
    for kind in ALL {
        let l = limiter(kind, Rate::per_minute(10), 10);
        let mut state = State::Fresh;
        assert!(take(&l, &mut state, boundary - 1, 10).allowed, "{kind:?}");
        let second = take(&l, &mut state, boundary, 10);
        assert_eq!(second.allowed, kind == Fixed, "{kind:?}");
    }
}

#[test]
fn the_sliding_window_counter_is_exact_per_aligned_window_only() {
    // 10/s, burst 10: W = 1 s. The burst spent in the last nanosecond of
    // window 99, then one request every 100 ms of window 100: the counter
    // weighs the previous window as if its requests had been spread evenly,
    // so it admits 19 within 900 ms + 1 ns, as many as a token bucket
    // (B + floor(T * rate)). The sliding log admits no more than 10 in any
    // window of 1 s.
    let t = 100 * SEC;
    for (kind, expected) in [(Sliding, 19), (Token, 19), (Log, 10)] {
        let l = limiter(kind, Rate::per_second(10), 10);
        let mut state = State::Fresh;
        let mut admitted = 0;
        if take(&l, &mut state, t - 1, 10).allowed {
            admitted += 10;
        }
        for k in 1..=9 {
            if take(&l, &mut state, t + k * 100 * MS, 1).allowed {
                admitted += 1;
            }
        }
        assert_eq!(admitted, expected, "{kind:?}");
    }
}

#[test]
fn huge_clock_readings_do_not_overflow() {
    let rates = [
        (Rate::per_second(1_000_000), 1_000),
        (Rate::new(7, 250 * MS).expect("valid"), 7),
        (Rate::new(1, DAY).expect("valid"), 3),
    ];
    let nows = [
        1_800_000_000_000_000_000, // today, in Unix nanoseconds
        u64::MAX / 2,
        u64::MAX / 2 + 1,
        u64::MAX / 2 + 123_456_789,
    ];
    for kind in ALL {
        for (rate, burst) in rates {
            for now in nows {
                let l = limiter(kind, rate, burst);
                let mut state = State::Fresh;
                assert!(take(&l, &mut state, now, 1).allowed, "{kind:?}");
                let d = take(&l, &mut state, now, burst);
                assert!(!d.allowed, "{kind:?}");
                let wait = d.retry_after.expect("refused");
                assert!(wait > 0 && wait <= 2 * d.reset_after.max(1), "{kind:?}");
                assert!(l.idle_at(&state) > now, "{kind:?}");
                let later = now + wait;
                assert!(take(&l, &mut state, later, burst).allowed, "{kind:?}");
                // Far in the future, and back: no arithmetic overflows.
                assert!(peek(&l, &state, u64::MAX).allowed, "{kind:?}");
                assert_eq!(peek(&l, &state, u64::MAX).remaining, burst, "{kind:?}");
                peek(&l, &state, 0);
            }
            // At the very last nanosecond a u64 holds.
            let l = limiter(kind, rate, burst);
            let mut state = State::Fresh;
            assert!(take(&l, &mut state, u64::MAX, burst).allowed, "{kind:?}");
            let d = take(&l, &mut state, u64::MAX, 1);
            assert!(!d.allowed && d.retry_after > Some(0), "{kind:?}");
            assert!(l.idle_at(&state) > u64::MAX / 2, "{kind:?}");
            peek(&l, &state, 0);
        }
    }
}

#[test]
fn per_key_state_is_sixteen_bytes() {
    // A level and a time; one (128-bit) timestamp; a window index and a
    // count; a window index and two counts.
    assert_eq!(size_of::<BucketState>(), 16);
    assert_eq!(size_of::<GcraState>(), 16);
    assert_eq!(size_of::<FixedWindowState>(), 16);
    assert_eq!(size_of::<SlidingWindowState>(), 16);
}
