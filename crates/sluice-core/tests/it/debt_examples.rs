//! Debt, case by case: the worked examples of `docs/algorithms.md`
//! ("Settlement and debt"), one per family, and debits of absurd amounts.

use crate::common;

use common::{DAY, MS, SEC};
use sluice_core::algorithms::fixed_window::FixedWindowState;
use sluice_core::{
    Algorithm, AlgorithmKind, Debited, FixedWindow, Gcra, LeakyBucket, LimitSpec, Rate, SlidingLog,
    SlidingWindow, State, TokenBucket,
};

const T: u64 = 100 * SEC;

/// What a peek says at `at`: (allowed, remaining, retry_after, reset_after).
fn peek<A: Algorithm>(alg: &A, s: &A::State, at: u64) -> (bool, u64, Option<u64>, u64) {
    let d = alg.check(s, at, 0).expect("a peek").decision;
    (d.allowed, d.remaining, d.retry_after, d.reset_after)
}

fn retry<A: Algorithm>(alg: &A, s: &A::State, at: u64, cost: u64) -> Option<u64> {
    alg.check(s, at, cost)
        .expect("a possible cost")
        .decision
        .retry_after
}

fn debited(charged: u64, excess: u64) -> Debited {
    Debited { charged, excess }
}

/// 10/s, burst 10: the burst at 100 s, then 5 settled after it, then 20
/// more with at most 10 of debt.
fn bucket_example<A: Algorithm>(alg: &A) {
    let mut s = A::State::default();
    assert!(alg.check_and_apply(&mut s, T, 10).unwrap().allowed);
    assert_eq!(alg.debit(&mut s, T, 5, 10), debited(5, 0));
    // 5 of debt, paid off at 10/s: 0.5 s; full 1 s later.
    assert_eq!(peek(alg, &s, T), (false, 0, Some(500 * MS), 1500 * MS));
    assert_eq!(retry(alg, &s, T, 1), Some(600 * MS));
    // The debt may reach 10: 5 more are charged, 15 are excess.
    assert_eq!(alg.debit(&mut s, T, 20, 10), debited(5, 15));
    assert_eq!(alg.idle_at(&s), T + 2 * SEC);
    // Paid off at 101 s: the limit is empty then, not in debt.
    assert!(!peek(alg, &s, T + SEC - 1).0);
    assert_eq!(peek(alg, &s, T + SEC), (true, 0, None, SEC));
    assert!(
        alg.check_and_apply(&mut s, T + 1100 * MS, 1)
            .unwrap()
            .allowed
    );
}

#[test]
fn the_buckets_and_gcra_pay_debt_off_at_the_rate() {
    let rate = Rate::per_second(10);
    bucket_example(&TokenBucket::new(rate, 10).unwrap());
    bucket_example(&Gcra::new(rate, 10).unwrap());
    bucket_example(&LeakyBucket::new(rate, 10, true).unwrap());
}

#[test]
fn the_fixed_window_carries_debt_a_burst_per_window() {
    // 10/s, burst 10: windows of 1 s, [100 s, 101 s), ...
    let fw = FixedWindow::new(Rate::per_second(10), 10).unwrap();
    let at = T + 250 * MS;
    let mut s = FixedWindowState::default();
    assert!(fw.check_and_apply(&mut s, at, 10).unwrap().allowed);
    assert_eq!(fw.debit(&mut s, at, 25, u64::MAX), debited(25, 0));
    // A count of 35: 25 carried to 101 s, 15 to 102 s, 5 to 103 s.
    assert_eq!(peek(&fw, &s, at), (false, 0, Some(2750 * MS), 3750 * MS));
    assert_eq!(retry(&fw, &s, at, 5), Some(2750 * MS));
    assert_eq!(retry(&fw, &s, at, 6), Some(3750 * MS));
    assert_eq!(peek(&fw, &s, T + 2 * SEC).2, Some(SEC));
    assert_eq!(peek(&fw, &s, T + 3 * SEC), (true, 5, None, SEC));
    assert_eq!(fw.idle_at(&s), T + 4 * SEC);

    // Forgiven at the window's end instead.
    let forgiving = fw.with_debt_forgiven(true);
    assert_eq!(
        peek(&forgiving, &s, at),
        (false, 0, Some(750 * MS), 750 * MS)
    );
    assert_eq!(peek(&forgiving, &s, T + SEC), (true, 10, None, 0));
    assert_eq!(forgiving.idle_at(&s), T + SEC);
}

#[test]
fn the_sliding_window_counter_carries_debt_and_weighs_it_at_the_rate() {
    // 10/s, burst 10: windows of 1 s.
    let sw = SlidingWindow::new(Rate::per_second(10), 10).unwrap();
    let at = T + 250 * MS;
    let mut s = Default::default();
    assert!(sw.check_and_apply(&mut s, at, 10).unwrap().allowed);
    assert_eq!(sw.debit(&mut s, at, 15, u64::MAX), debited(15, 0));
    // The estimate is 25 until 101 s; then 10 weigh as the previous
    // count and 15 carry on: 10 * (1 - e) + 15, down to 15 at 102 s; then
    // 10 * (1 - e) + 5, down to 10 (no debt) at 102.5 s.
    assert_eq!(peek(&sw, &s, at), (false, 0, Some(2250 * MS), 3750 * MS));
    assert_eq!(retry(&sw, &s, at, 1), Some(2350 * MS));
    assert!(peek(&sw, &s, T + 2500 * MS).0);
    assert!(!peek(&sw, &s, T + 2500 * MS - 1).0);
    assert_eq!(sw.idle_at(&s), T + 4 * SEC);

    // Forgiven at the window's end: from 101 s, only 10 weigh, falling.
    let forgiving = sw.with_debt_forgiven(true);
    assert_eq!(
        peek(&forgiving, &s, at),
        (false, 0, Some(750 * MS), 1750 * MS)
    );
    assert_eq!(forgiving.idle_at(&s), T + 2 * SEC);
}

#[test]
fn the_sliding_log_logs_debt_as_entries_leave_the_window() {
    // 10/s, burst 10: a window of 1 s.
    let log = SlidingLog::new(Rate::per_second(10), 10).unwrap();
    let mut s = Default::default();
    assert!(log.check_and_apply(&mut s, T, 5).unwrap().allowed);
    let at = T + 500 * MS;
    assert!(log.check_and_apply(&mut s, at, 5).unwrap().allowed);
    assert_eq!(log.debit(&mut s, at, 12, u64::MAX), debited(12, 0));
    assert_eq!(s.debt(), 12);
    // Logged as the entries leave: 5 at 101 s, 5 at 101.5 s, the last 2
    // at 102 s, when the window holds 5 (from 101.5 s) and 2.
    assert_eq!(peek(&log, &s, at), (false, 0, Some(1500 * MS), 2500 * MS));
    assert_eq!(retry(&log, &s, at, 3), Some(1500 * MS));
    assert_eq!(retry(&log, &s, at, 4), Some(2 * SEC));
    assert_eq!(peek(&log, &s, T + 2 * SEC), (true, 3, None, SEC));
    assert_eq!(log.idle_at(&s), T + 3 * SEC);

    // Forgiven when the first entry leaves (101 s): as if never charged.
    let forgiving = log.with_debt_forgiven(true);
    assert_eq!(peek(&forgiving, &s, at), (false, 0, Some(500 * MS), SEC));
    assert_eq!(peek(&forgiving, &s, T + SEC), (true, 5, None, 500 * MS));
}

const KINDS: [AlgorithmKind; 6] = AlgorithmKind::ALL;

#[test]
fn a_debit_on_a_fresh_key_starts_its_state_and_nothing_changes_nothing() {
    for algorithm in KINDS {
        let spec = LimitSpec {
            algorithm,
            rate: Rate::per_second(5),
            burst: 5,
            nodelay: false,
        };
        let l = spec.build().unwrap();
        let mut state = State::Fresh;
        assert_eq!(
            l.debit(&mut state, T, 0, 10),
            debited(0, 0),
            "{algorithm:?}"
        );
        assert_eq!(state, State::Fresh, "{algorithm:?}");
        assert_eq!(l.debit(&mut state, T, 7, 1), debited(6, 1), "{algorithm:?}");
        assert_ne!(state, State::Fresh, "{algorithm:?}");
        let d = l.check(&state, T, 0).unwrap().decision;
        assert!(!d.allowed && d.remaining == 0, "{algorithm:?}: {d:?}");
        assert!(l.idle_at(&state) > T, "{algorithm:?}");
    }
}

#[test]
fn debits_of_absurd_amounts_never_fail() {
    let rates = [
        (Rate::per_second(1_000_000), 1_000_000),
        (Rate::new(1, DAY).unwrap(), 1),
        (Rate::new(3, 7 * SEC).unwrap(), 50),
        // About 400 years per window.
        (Rate::new(1, 400 * 365 * DAY / 2).unwrap(), 2),
    ];
    for algorithm in KINDS {
        for (rate, burst) in rates {
            let spec = LimitSpec {
                algorithm,
                rate,
                burst: burst.min(10_000),
                nodelay: false,
            };
            let l = spec.build().unwrap();
            for now in [0, 1_800_000_000_000_000_000, u64::MAX / 2, u64::MAX] {
                for max_debt in [0, 1, u64::MAX] {
                    let ctx = format!("{algorithm:?} {rate} at {now}, max debt {max_debt}");
                    let mut state = State::Fresh;
                    for _ in 0..2 {
                        let d = l.debit(&mut state, now, u64::MAX, max_debt);
                        assert_eq!(d.charged.checked_add(d.excess), Some(u64::MAX), "{ctx}");
                        let peek = l.check(&state, now, 0).unwrap().decision;
                        assert_eq!(peek.remaining, 0, "{ctx}");
                        assert!(l.idle_at(&state) >= now, "{ctx}");
                        assert!(l.check(&state, u64::MAX, 1).is_ok(), "{ctx}");
                        l.check(&state, 0, 1).unwrap();
                    }
                    l.refund(&mut state, now, u64::MAX);
                    assert!(
                        l.check(&state, now, spec.burst).unwrap().decision.allowed,
                        "{ctx}"
                    );
                }
            }
        }
    }
}
