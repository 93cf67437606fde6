//! The decision script against sluice-core: on random timelines (whole
//! microseconds, as Redis's clock gives them), random rates, bursts and
//! costs, every field of every decision equals the `Limiter`'s.

#![allow(clippy::unwrap_used)]

use crate::common;

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use redis::AsyncCommands;
use sluice_core::{AlgorithmKind, State};
use sluice_redis::{RedisCheck, RedisStore, key_name};
use sluice_store::KeyId;

use common::{KINDS, env, fresh_id, limiter, reference};

/// Periods in ns: round ones, long ones, and odd ones that make the unit finer than a
/// nanosecond (g < 1000).
const PERIODS: [u64; 11] = [
    1_000_000,
    250_000_000,
    1_000_000_000,
    60_000_000_000,
    3_600_000_000_000,
    86_400_000_000_000,
    604_800_000_000_000, // a week: windows past 2^53 ns
    333_333,
    1_000_001,
    7_000_000_007,
    999,
];

/// One step of a timeline: how time moves, and a cost.
#[derive(Debug, Clone, Copy)]
struct Step {
    how: u8,
    k: u64,
    x: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0u8..16, 0u64..=40, any::<u64>()).prop_map(|(how, k, x)| Step { how, k, x }),
        1..40,
    )
}

/// The next time, in µs, given the window in µs.
fn advance(now: u64, window_us: u64, s: Step) -> u64 {
    let frac = window_us.saturating_mul(s.k) / 16;
    match s.how {
        0..=2 => now,
        3..=4 => now + 1 + s.x % 100,
        5..=7 => now + frac,
        8 => now + frac + 1,
        9 => now + frac.saturating_sub(1),
        10 => now + window_us * 2 + s.x % 1_000_000,
        11 => now.saturating_sub(1 + s.x % (window_us / 4 + 1)), // the clock steps back
        _ => now + s.x % (window_us + 1),
    }
}

/// A limit (algorithm, amount, period, burst, nodelay), a start time and
/// the steps of a timeline.
#[allow(clippy::type_complexity)]
fn limit_and_timeline()
-> impl Strategy<Value = (AlgorithmKind, u64, u64, u64, bool, u64, Vec<Step>)> {
    (
        kind(),
        1u64..=1000,
        prop::sample::select(PERIODS.to_vec()),
        1u64..=50,
        any::<bool>(),
        start(),
        steps(),
    )
}

fn kind() -> impl Strategy<Value = AlgorithmKind> {
    prop::sample::select(KINDS.to_vec())
}

fn start() -> impl Strategy<Value = u64> {
    prop_oneof![Just(0u64), 1_600_000_000_000_000u64..1_900_000_000_000_000]
}

/// `cases`, or `SLUICE_CONFORMANCE_CASES` when set (for long runs).
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_CONFORMANCE_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

#[test]
fn every_decision_equals_sluice_core() {
    timelines_equal_sluice_core("conf", 300, false);
}

/// Refunds (the script's refund mode) against `Limiter::refund`: on random
/// timelines, clock steps back included, about a quarter of the steps give
/// an amount back (up to twice the burst, given back whole, as the memory
/// store does: more than the burst matters to a GCRA whose clock stepped
/// back) instead of charging; the state each leaves, read by the peek the
/// refund answers, equals sluice-core's.
#[test]
fn every_refund_equals_sluice_core() {
    timelines_equal_sluice_core("refund", 200, true);
}

/// Drives the script and sluice-core through random timelines side by
/// side, with some steps refunds when `refunds`: every decision is equal,
/// and a key lives at least until sluice-core's `idle_at`.
fn timelines_equal_sluice_core(label: &str, cases: u32, refunds: bool) {
    let Some(env) = env() else { return };
    let strategy = limit_and_timeline();
    let mut runner = TestRunner::new(config(cases));
    runner
        .run(
            &strategy,
            |(kind, amount, period, burst, nodelay, start, steps)| {
                let limiter = limiter(kind, amount, period, burst, nodelay);
                // Windows under a microsecond are outside the exact domain.
                prop_assume!(RedisStore::is_exact(&limiter));
                let store = RedisStore::from_connection(env.conn.clone(), None);
                let id = fresh_id(label);
                let key = KeyId(0x5eed);
                let window_us = limiter_window_us(amount, period, burst);
                let mut state = State::default();
                let mut now = start;
                for (i, s) in steps.iter().enumerate() {
                    now = advance(now, window_us, *s);
                    // The top bits, apart from how the clock moved: a
                    // refund may land on a step back.
                    let refund = refunds && s.x >> 62 == 0;
                    let cost = if refund {
                        s.x % (2 * burst + 1)
                    } else {
                        s.x % (burst + 1)
                    };
                    let check = [RedisCheck {
                        limit_id: &id,
                        limiter: &limiter,
                        key,
                        cost,
                        reserve: 0,
                    }];
                    let (got, expected) = if refund {
                        limiter.refund(&mut state, now * 1000, cost);
                        let (_, peeked) = reference(&mut [(&limiter, &mut state, 0)], now * 1000);
                        let got = env.rt.block_on(store.refund_at(&check, now)).unwrap();
                        (got, peeked)
                    } else {
                        let (_, decided) =
                            reference(&mut [(&limiter, &mut state, cost)], now * 1000);
                        let got = env.rt.block_on(store.check_at(&check, now)).unwrap();
                        prop_assert_eq!(got.allowed, decided[0].allowed);
                        (got, decided)
                    };
                    prop_assert_eq!(
                        got.decisions[0],
                        expected[0],
                        "{:?} step {} at {} us, {} {}",
                        kind,
                        i,
                        now,
                        if refund { "refund" } else { "cost" },
                        cost
                    );
                    // The key lives at least until sluice-core's idle_at.
                    let idle_at = limiter.idle_at(&state);
                    if kind != AlgorithmKind::SlidingLog && idle_at > now * 1000 {
                        let mut conn = env.conn.clone();
                        let raw: Option<Vec<u8>> =
                            env.rt.block_on(conn.get(key_name(&id, key))).unwrap();
                        let raw = raw.unwrap_or_default();
                        prop_assert_eq!(raw.len(), 32, "a live state is missing");
                        let expires_us = f64::from_le_bytes(raw[24..32].try_into().unwrap()) as u64;
                        prop_assert!(
                            expires_us * 1000 >= idle_at,
                            "expires at {} us, idle at {} ns",
                            expires_us,
                            idle_at
                        );
                    }
                }
                Ok(())
            },
        )
        .unwrap();
}

#[test]
fn groups_are_all_or_nothing_like_the_memory_store() {
    let Some(env) = env() else { return };
    let strategy = (
        prop::collection::vec(kind(), 3),
        1u64..=100,
        prop::sample::select(PERIODS.to_vec()),
        1u64..=8,
        start(),
        steps(),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(config(150));
    runner
        .run(
            &strategy,
            |(kinds, amount, period, burst, start, steps, per_tag)| {
                let limiters: Vec<_> = kinds
                    .iter()
                    .enumerate()
                    .map(|(i, k)| limiter(*k, amount, period, burst + i as u64, false))
                    .collect();
                // Per tag: each client key decided on its own, committed in turn
                // and refunded on a refusal, as in Redis Cluster.
                let store = if per_tag {
                    RedisStore::from_connection_per_tag(env.conn.clone())
                } else {
                    RedisStore::from_connection(env.conn.clone(), None)
                };
                let ids: Vec<String> = (0..3).map(|_| fresh_id("group")).collect();
                // Two limits on one client key, one on another: two hash tags.
                let keys = [KeyId(1), KeyId(1), KeyId(2)];
                let window_us = limiter_window_us(amount, period, burst + 2);
                let mut states: Vec<State> = vec![State::default(); 3];
                let mut now = start;
                for s in &steps {
                    // Time only moves forward here: a refund cannot undo a
                    // request exactly on a clock that steps back.
                    let how = if s.how == 11 { 0 } else { s.how };
                    now = advance(now, window_us, Step { how, ..*s });
                    let costs: Vec<u64> = (0..3).map(|i| (s.x >> (8 * i)) % (burst + 1)).collect();
                    let mut refs: Vec<_> = limiters
                        .iter()
                        .zip(states.iter_mut())
                        .zip(&costs)
                        .map(|((l, st), c)| (l, st, *c))
                        .collect();
                    let (allowed, expected) = reference(&mut refs, now * 1000);
                    let checks: Vec<RedisCheck<'_>> = (0..3)
                        .map(|i| RedisCheck {
                            limit_id: &ids[i],
                            limiter: &limiters[i],
                            key: keys[i],
                            cost: costs[i],
                            reserve: 0,
                        })
                        .collect();
                    let got = env.rt.block_on(store.check_at(&checks, now)).unwrap();
                    prop_assert_eq!(got.allowed, allowed);
                    prop_assert_eq!(
                        got.decisions.to_vec(),
                        expected,
                        "{:?} at {} us, costs {:?}",
                        kinds,
                        now,
                        costs
                    );
                }
                Ok(())
            },
        )
        .unwrap();
}

fn limiter_window_us(amount: u64, period: u64, burst: u64) -> u64 {
    (u128::from(burst) * u128::from(period) / u128::from(amount) / 1000).max(1) as u64
}
