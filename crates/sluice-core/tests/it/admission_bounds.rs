//! How much each algorithm admits over time, whatever the clients do.
//!
//! * Token bucket, GCRA, leaky bucket, sliding log and sliding-window
//!   counter: over any span of `T` ns (both ends included), at most
//!   `B + floor(T * amount / period)`: the burst plus what the rate adds.
//! * Sliding log: at most `B` in any sliding window `(t - W, t]`.
//! * Fixed window and sliding-window counter: at most `B` in any aligned
//!   window. (The fixed window can still pass `2B` across a boundary; see
//!   `edge_cases.rs`.)

use crate::common;

use common::Params;
use common::scenario::{self, Scenario, config, drive, scenario};
use proptest::prelude::*;
use sluice_core::Algorithm;

/// The `(time, cost)` of every admitted request with a cost, in order.
fn admissions<A: Algorithm>(alg: &A, s: &Scenario) -> Result<Vec<(u64, u64)>, TestCaseError> {
    let mut admitted = Vec::new();
    drive(alg, s, |event| {
        if let Ok(outcome) = event.result
            && outcome.decision.allowed
            && event.cost > 0
        {
            admitted.push((event.now, event.cost));
        }
        Ok(())
    })?;
    Ok(admitted)
}

/// Cost admitted at times in `[from, to]`.
fn admitted_in(admitted: &[(u64, u64)], from: u64, to: u64) -> u128 {
    admitted
        .iter()
        .filter(|(t, _)| (from..=to).contains(t))
        .map(|(_, c)| u128::from(*c))
        .sum()
}

/// At most `B + floor(T * amount / period)` over every span `T` between two
/// admissions (the worst spans start and end on one).
fn within_bucket_bound(p: Params, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    for &(from, _) in admitted {
        for &(to, _) in admitted.iter().filter(|(t, _)| *t >= from) {
            let n = admitted_in(admitted, from, to);
            let bound = p.bucket_bound(to - from);
            prop_assert!(
                n <= bound,
                "{} admitted in [{}, {}], bound {}",
                n,
                from,
                to,
                bound
            );
        }
    }
    Ok(())
}

/// At most `B` in each aligned window.
fn within_aligned_windows(p: Params, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
    for &(t, c) in admitted {
        *per_window.entry(p.window_of(t)).or_default() += c;
    }
    for (window, n) in per_window {
        prop_assert!(n <= p.burst, "{} admitted in window {}", n, window);
    }
    Ok(())
}

/// At most `B` in every sliding window `(t - W, t]` (the worst ones end on
/// an admission).
fn within_sliding_windows(p: Params, admitted: &[(u64, u64)]) -> Result<(), TestCaseError> {
    let in_window = |at: u64, t: u64| {
        at <= t
            && u128::from(t - at) * u128::from(p.amount)
                < u128::from(p.burst) * u128::from(p.period)
    };
    for &(t, _) in admitted {
        let n: u64 = admitted
            .iter()
            .filter(|(at, _)| in_window(*at, t))
            .map(|(_, c)| c)
            .sum();
        prop_assert!(n <= p.burst, "{} admitted in the window ending at {}", n, t);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn token_bucket_admits_at_most_burst_plus_rate(s in scenario()) {
        let admitted = admissions(&scenario::token_bucket(s.params), &s)?;
        within_bucket_bound(s.params, &admitted)?;
    }

    #[test]
    fn gcra_admits_at_most_burst_plus_rate(s in scenario()) {
        let admitted = admissions(&scenario::gcra(s.params), &s)?;
        within_bucket_bound(s.params, &admitted)?;
    }

    #[test]
    fn leaky_bucket_admits_at_most_burst_plus_rate(s in scenario(), nodelay in any::<bool>()) {
        let admitted = admissions(&scenario::leaky_bucket(s.params, nodelay), &s)?;
        within_bucket_bound(s.params, &admitted)?;
    }

    #[test]
    fn sliding_log_admits_at_most_burst_per_sliding_window(s in scenario()) {
        let admitted = admissions(&scenario::sliding_log(s.params), &s)?;
        within_sliding_windows(s.params, &admitted)?;
        within_bucket_bound(s.params, &admitted)?;
    }

    #[test]
    fn sliding_window_admits_at_most_burst_per_aligned_window(s in scenario()) {
        let admitted = admissions(&scenario::sliding_window(s.params), &s)?;
        within_aligned_windows(s.params, &admitted)?;
        within_bucket_bound(s.params, &admitted)?;
    }

    #[test]
    fn fixed_window_admits_at_most_burst_per_aligned_window(s in scenario()) {
        let admitted = admissions(&scenario::fixed_window(s.params), &s)?;
        within_aligned_windows(s.params, &admitted)?;
    }
}
