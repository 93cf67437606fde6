//! Debits (the script's debit mode) against sluice-core: on random
//! timelines (whole microseconds, the clock stepping back at times), random
//! rates and bursts, debt forgiven or not, random checks, peeks, refunds
//! and debits with various `max_debt`: every decision and every `Debited`
//! equals the `Limiter`'s, and a key lives at least until sluice-core's
//! `idle_at` (its debt paid off).

use crate::common;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use redis::AsyncCommands;
use sluice_core::{AlgorithmKind, Debited, Limiter, State};
use sluice_redis::{RedisCheck, RedisStore, RedisStoreError, key_name};
use sluice_store::KeyId;

use common::{Env, KINDS, env, fresh_id, limiter, reference};

/// Periods in ns: round ones, and odd ones whose windows are not whole
/// microseconds (a sliding log then takes no debit).
const PERIODS: [u64; 7] = [
    1_000_000,
    250_000_000,
    1_000_000_000,
    3_600_000_000_000,
    86_400_000_000_000,
    333_333,
    7_000_000_007,
];

/// One step: how far time moves (in sixteenths of a window), what is
/// done, and random bits for its amounts.
#[derive(Debug, Clone, Copy)]
struct Step {
    how: u8,
    k: u64,
    op: u8,
    x: u64,
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(
        (0u8..12, 0u64..=40, 0u8..10, any::<u64>()).prop_map(|(how, k, op, x)| Step {
            how,
            k,
            op,
            x,
        }),
        1..40,
    )
}

fn advance(now: u64, window_us: u64, s: Step) -> u64 {
    let frac = window_us.saturating_mul(s.k) / 16;
    match s.how {
        0..=2 => now,
        3 => now + 1 + s.x % 100,
        4..=6 => now + frac,
        7 => now + frac + 1,
        8 => now + frac.saturating_sub(1),
        9 => now + window_us * 3,
        10 => now.saturating_sub(1 + s.x % (window_us / 4 + 1)),
        _ => now + s.x % (window_us + 1),
    }
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

/// Whether the window `burst / rate` is a whole number of microseconds.
fn whole_us(amount: u64, period: u64, burst: u64) -> bool {
    (u128::from(burst) * u128::from(period)) % (u128::from(amount) * 1000) == 0
}

#[test]
fn every_debit_equals_sluice_core() {
    let Some(env) = env() else { return };
    let strategy = (
        prop::sample::select(KINDS.to_vec()),
        prop_oneof![Just(1u64), 1u64..=1000],
        prop::sample::select(PERIODS.to_vec()),
        1u64..=12,
        any::<bool>(),
        prop_oneof![Just(0u64), 1_600_000_000_000_000u64..1_900_000_000_000_000],
        steps(),
    );
    let mut runner = TestRunner::new(config(300));
    runner
        .run(
            &strategy,
            |(kind, amount, period, burst, forgive, start, steps)| {
                let limiter =
                    limiter(kind, amount, period, burst, false).with_debt_forgiven(forgive);
                prop_assume!(RedisStore::is_exact(&limiter));
                let debits = kind != AlgorithmKind::SlidingLog || whole_us(amount, period, burst);
                let window_us = (u128::from(burst) * u128::from(period) / u128::from(amount) / 1000)
                    .max(1) as u64;
                let t = Timeline {
                    env: &env,
                    store: RedisStore::from_connection(env.conn.clone(), None),
                    id: fresh_id("debt"),
                    key: KeyId(0xdeb7),
                    limiter,
                    burst,
                };
                let mut state = State::default();
                let (mut now, mut latest) = (start, start);
                for (i, s) in steps.iter().enumerate() {
                    now = advance(now, window_us, *s);
                    latest = latest.max(now);
                    t.step(&mut state, now, *s, debits)
                        .and_then(|()| t.lives_until_idle(&state, latest))
                        .map_err(|e| TestCaseError::fail(format!("step {i} at {now} us: {e}")))?;
                }
                Ok(())
            },
        )
        .unwrap();
}

struct Timeline<'e> {
    env: &'e Env,
    store: RedisStore,
    id: String,
    key: KeyId,
    limiter: Limiter,
    burst: u64,
}

impl Timeline<'_> {
    fn check(&self, cost: u64) -> [RedisCheck<'_>; 1] {
        [RedisCheck {
            limit_id: &self.id,
            limiter: &self.limiter,
            key: self.key,
            cost,
            reserve: 0,
        }]
    }

    /// One step on Redis and on sluice-core; an error says what differed.
    fn step(&self, state: &mut State, now: u64, s: Step, debits: bool) -> Result<(), String> {
        let (l, b, rt, ns) = (&self.limiter, self.burst, &self.env.rt, now * 1000);
        match s.op {
            0..=3 => {
                let cost = s.x % (b + 1);
                let (_, want) = reference(&mut [(l, state, cost)], ns);
                let got = rt.block_on(self.store.check_at(&self.check(cost), now));
                let got = got.map_err(|e| e.to_string())?.decisions[0];
                same(&got, &want[0], &format!("check of {cost}"))?;
            }
            4 => {
                let (_, want) = reference(&mut [(l, state, 0)], ns);
                let got = rt.block_on(self.store.check_at(&self.check(0), now));
                same(
                    &got.map_err(|e| e.to_string())?.decisions[0],
                    &want[0],
                    "peek",
                )?;
            }
            5..=6 => {
                let cost = s.x % (3 * b + 1);
                l.refund(state, ns, cost);
                let (_, want) = reference(&mut [(l, state, 0)], ns);
                let got = rt.block_on(self.store.refund_at(&self.check(cost), now));
                let got = got.map_err(|e| e.to_string())?.decisions[0];
                same(&got, &want[0], &format!("refund of {cost}"))?;
            }
            _ => {
                let amount = s.x % (4 * b + 2);
                let max_debt = match (s.x >> 32) % 4 {
                    0 => 0,
                    1 => u64::MAX,
                    _ => (s.x >> 40) % (2 * b + 1),
                };
                let got = rt.block_on(self.store.debit_at(&self.check(amount)[0], max_debt, now));
                if !debits {
                    return match got {
                        Err(RedisStoreError::DebitUnsupported(_)) => Ok(()),
                        other => Err(format!("a log off whole µs debited: {other:?}")),
                    };
                }
                let want = l.debit(state, ns, amount, max_debt);
                let got: Debited = got.map_err(|e| e.to_string())?;
                if got != want {
                    return Err(format!(
                        "debit of {amount} (max {max_debt}): {got:?}, sluice-core {want:?}"
                    ));
                }
            }
        }
        Ok(())
    }

    /// The key outlives sluice-core's `idle_at`: a string state's stored
    /// expiry, a log's TTL (which a test clock lengthens by an hour), set
    /// by a write at `latest` at the latest.
    fn lives_until_idle(&self, state: &State, latest: u64) -> Result<(), String> {
        let now = latest;
        let idle_at = self.limiter.idle_at(state);
        if idle_at <= now * 1000 || idle_at == u64::MAX {
            return Ok(());
        }
        let mut conn = self.env.conn.clone();
        let name = key_name(&self.id, self.key);
        if matches!(self.limiter, Limiter::SlidingLog(_)) {
            let ttl: i64 = self.env.rt.block_on(conn.pttl(&name)).unwrap();
            let need_ms = (idle_at - now * 1000).div_ceil(1_000_000) as i64;
            if ttl < need_ms + 3_600_000 - 5_000 {
                return Err(format!("log lives {ttl} ms, needs {need_ms} ms (+1 h)"));
            }
            return Ok(());
        }
        let raw: Option<Vec<u8>> = self.env.rt.block_on(conn.get(&name)).unwrap();
        let raw = raw.unwrap_or_default();
        if raw.len() != 32 {
            return Err("a live state is missing".into());
        }
        let expires_us = f64::from_le_bytes(raw[24..32].try_into().unwrap()) as u64;
        if expires_us * 1000 < idle_at {
            return Err(format!("expires at {expires_us} us, idle at {idle_at} ns"));
        }
        Ok(())
    }
}

fn same(
    got: &sluice_core::Decision,
    want: &sluice_core::Decision,
    what: &str,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: redis {got:?}, sluice-core {want:?}"))
    }
}

/// A key in debt checked with a reserve (a priority class, a delay limit's
/// plain bucket) and in a group with another limit: the script answers
/// what the memory store answers, for every algorithm, debt forgiven or
/// not, on the same timeline.
#[test]
fn keys_in_debt_decide_alike_with_reserves_and_in_groups() {
    use sluice_core::ManualClock;
    use sluice_store::MemoryStore;
    use sluice_store::seam::{Check, CounterDef, Store, now_or_never};

    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let start_us = 1_800_000_000_000_000_u64;
    for kind in KINDS {
        for forgive in [false, true] {
            let spec = sluice_core::LimitSpec {
                algorithm: kind,
                rate: sluice_core::Rate::per_second(4),
                burst: 8,
                nodelay: true,
            };
            let def = CounterDef::new(&fresh_id("debt-group"), spec)
                .unwrap()
                .with_debt_forgiven(forgive);
            let other = CounterDef::new(&fresh_id("debt-other"), spec).unwrap();
            let clock = ManualClock::new(start_us * 1000);
            let memory = MemoryStore::with_clock(Default::default(), clock.clone());
            let (c, o) = (memory.counter(def.clone()), memory.counter(other.clone()));
            let key = KeyId(0x6a);
            let debited = now_or_never(Store::debit(&memory, &c, key, 13, 20));
            let want = debited.unwrap().unwrap();
            let l = *def.limiter();
            let redis_check = |cost, reserve| RedisCheck {
                limit_id: def.id(),
                limiter: &l,
                key,
                cost,
                reserve,
            };
            let got = env
                .rt
                .block_on(store.debit_at(&redis_check(13, 0), 20, start_us))
                .unwrap();
            assert_eq!(got, want, "{kind:?}");
            // Through the windows: reserves, and groups with a limit that
            // admits.
            for step in 0..12u64 {
                let now_us = start_us + step * 350_000;
                clock.set(now_us * 1000);
                let (cost, reserve) = (step % 3, step % 4);
                let seam = [
                    Check {
                        counter: &c,
                        key,
                        cost,
                        reserve,
                        lease: None,
                    },
                    Check {
                        counter: &o,
                        key,
                        cost: 1,
                        reserve: 0,
                        lease: None,
                    },
                ];
                let group = step % 2 == 1;
                let checks = if group { &seam[..] } else { &seam[..1] };
                let want = now_or_never(Store::check(&memory, checks)).unwrap();
                let lo = *other.limiter();
                let mut redis = vec![redis_check(cost, reserve)];
                if group {
                    redis.push(RedisCheck {
                        limit_id: other.id(),
                        limiter: &lo,
                        key,
                        cost: 1,
                        reserve: 0,
                    });
                }
                let got = env.rt.block_on(store.check_at(&redis, now_us));
                match (got, want) {
                    (Ok(got), Ok(want)) => {
                        assert_eq!(got.allowed, want.allowed, "{kind:?} {forgive} step {step}");
                        assert_eq!(
                            got.decisions.to_vec(),
                            want.decisions.to_vec(),
                            "{kind:?} forgiven {forgive}, step {step}: cost {cost}, reserve {reserve}"
                        );
                    }
                    (got, want) => assert_eq!(
                        got.is_err(),
                        want.is_err(),
                        "{kind:?} step {step}: {got:?} / {want:?}"
                    ),
                }
            }
        }
    }
}
