//! The engine decides alike on every store: the same scenario on the memory
//! store and on Redis (one node, a Cluster, shards, Sentinel) shows clients
//! the same verdicts, for all six algorithms and every policy feature.
//! Rates are slow (per hour) where the scenario must not refill while it
//! runs on Redis's clock.

#![allow(clippy::unwrap_used, missing_docs)]

use sluice_conformance::hasher;
use sluice_conformance::{Deployments, Kind, Shown, block, fresh_key, get, shown};
use sluice_core::{AlgorithmKind, Debited, Decision, LimitSpec, Limiter, ManualClock, Rate, State};
use sluice_redis::{RedisCheck, RedisStore};
use sluice_store::seam::{Check, Counter, CounterDef, Store, now_or_never};
use sluice_store::{KeyId, MemoryStore};

#[path = "decisions/leases.rs"]
mod leases;

/// Runs `scenario` on every deployment and checks that each shows what the
/// memory store shows.
fn same_everywhere(d: &Deployments, what: &str, scenario: impl Fn(Kind) -> Vec<Shown>) {
    let mut memory = None;
    for kind in d.kinds() {
        let seen = scenario(kind);
        match &memory {
            None => memory = Some(seen),
            Some(expected) => assert_eq!(&seen, expected, "{what}: {kind:?} against memory"),
        }
    }
    assert!(memory.is_some_and(|m| !m.is_empty()), "{what}: nothing ran");
}

fn run(d: &Deployments, kind: Kind, toml: &str, requests: &[(&str, &str)]) -> Vec<Shown> {
    let e = d.engine(kind, toml);
    let prefix = fresh_key("k");
    requests
        .iter()
        .map(|(key, path)| shown(&get(&e, &format!("{prefix}-{key}"), path).unwrap()))
        .collect()
}

fn every_algorithm_admits_its_burst_and_refuses_the_rest(d: &Deployments) {
    for algorithm in AlgorithmKind::ALL {
        let toml = format!(
            "[[limits]]\nname = \"a\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"{}\"\nrate = \"5/h\"\nburst = 5\n{}",
            algorithm.name(),
            if algorithm == AlgorithmKind::LeakyBucket {
                "nodelay = true\n"
            } else {
                ""
            }
        );
        same_everywhere(d, algorithm.name(), |kind| {
            let seen = run(d, kind, &toml, &[("a", "/"); 8]);
            assert_eq!(
                seen.iter().filter(|s| s.0).count(),
                5,
                "{algorithm:?} on {kind:?}"
            );
            seen
        });
    }
}

fn a_request_over_any_limit_charges_none(d: &Deployments) {
    let toml = r#"
[[limits]]
name = "per-key"
key = "header:X-Api-Key"
rate = "3/h"
burst = 3

[[limits]]
name = "export"
key = "header:X-Api-Key"
match = { path_prefix = "/export" }
rate = "1/h"
burst = 1
"#;
    same_everywhere(d, "all or nothing", |kind| {
        run(
            d,
            kind,
            toml,
            &[
                ("a", "/export"),
                ("a", "/export"),
                ("a", "/"),
                ("a", "/"),
                ("a", "/"),
            ],
        )
    });
}

fn classes_keep_their_share(d: &Deployments) {
    let toml = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "1000/h", burst = 1000 }]

[plans.pro]
limits = [{ rate = "1000/h", burst = 1000 }]

[[limits]]
name = "backend"
key = "global"
rate = "10/h"
burst = 10
max_share = { free = 80 }
"#;
    same_everywhere(d, "classes", |kind| {
        // Each deployment is its own Redis: `global` is this test's alone.
        let e = d.engine(kind, toml);
        let prefix = fresh_key("c");
        let mut seen = Vec::new();
        for n in 0..12 {
            seen.push(shown(&get(&e, &format!("{prefix}-f{n}"), "/").unwrap()));
        }
        let free = seen.iter().filter(|s| s.0).count();
        assert_eq!(free, 8, "{kind:?}: free gets 80 %");
        // `pro` is any key assigned to it at run time.
        let pro = format!("{prefix}-p");
        block(e.set_plan(&pro, "pro")).unwrap();
        for _ in 0..3 {
            seen.push(shown(&get(&e, &pro, "/").unwrap()));
        }
        seen
    });
}

fn a_class_refusal_shows_every_limit_that_refuses(d: &Deployments) {
    // The class's share of `class-backend` (2 of 10; its own name: a Redis
    // deployment keeps `global` counters across scenarios) and the key's
    // own limit (2) run out together: the third request is refused by both, and both say
    // so (the memory store once showed the key's limit as admitting).
    let toml = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "2/h", burst = 2 }]

[[limits]]
name = "class-backend"
key = "global"
rate = "10/h"
burst = 10
max_share = { free = 20 }
"#;
    same_everywhere(d, "class refusal", |kind| {
        let seen = run(d, kind, toml, &[("k", "/"), ("k", "/"), ("k", "/")]);
        let last = &seen[2];
        assert!(!last.0, "{kind:?}: refused");
        assert!(
            last.1.iter().all(|(_, _, _, allowed)| !allowed),
            "{kind:?}: every limit refuses: {seen:?}"
        );
        seen
    });
}

fn delay_holds_what_fits_and_refuses_the_rest(d: &Deployments) {
    let toml = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
on_limit = "delay"
max_delay = "20s"
max_queue = 3
limits = [{ algorithm = "gcra", rate = "1/10s", burst = 2 }]
"#;
    same_everywhere(d, "delay", |kind| {
        let e = d.engine(kind, toml);
        let key = fresh_key("d");
        (0..7)
            .map(|_| {
                let v = get(&e, &key, "/").unwrap();
                let mut s = shown(&v);
                // Whether it is held, not for how long (the clock moves).
                s.2.push(("held".into(), v.delay() > 0));
                s
            })
            .collect()
    });
}

fn credits_pay_for_what_the_plan_refuses(d: &Deployments) {
    let toml = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "2/h", burst = 2 }]
"#;
    same_everywhere(d, "credits", |kind| {
        let e = d.engine(kind, toml);
        let key = fresh_key("cr");
        block(e.grant_credits(&key, 3)).unwrap();
        let mut seen: Vec<Shown> = (0..6)
            .map(|_| shown(&get(&e, &key, "/").unwrap()))
            .collect();
        let left = block(e.credits(&key));
        seen.push((left == 0, Vec::new(), Vec::new()));
        assert_eq!(seen.iter().take(6).filter(|s| s.0).count(), 5, "{kind:?}");
        seen
    });
}

fn a_plan_change_carries_the_used_share_over(d: &Deployments) {
    let toml = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "10/h", burst = 20 }]

[plans.pro]
limits = [{ rate = "100/h", burst = 300 }]
"#;
    same_everywhere(d, "carry-over", |kind| {
        let e = d.engine(kind, toml);
        let key = fresh_key("co");
        let mut seen: Vec<Shown> = (0..15)
            .map(|_| shown(&get(&e, &key, "/").unwrap()))
            .collect();
        block(e.set_plan(&key, "pro")).unwrap();
        let v = get(&e, &key, "/").unwrap();
        // 75 % of 300 = 225 used, plus this request.
        assert_eq!(v.results[0].decision.remaining, 300 - 225 - 1, "{kind:?}");
        seen.push(shown(&v));
        block(e.clear_plan(&key)).unwrap();
        seen.push(shown(&get(&e, &key, "/").unwrap()));
        seen
    });
}

fn shadow_limits_record_and_never_refuse(d: &Deployments) {
    let toml = r#"
[[limits]]
name = "enforced"
key = "header:X-Api-Key"
rate = "100/h"
burst = 100

[[limits]]
name = "trial"
key = "header:X-Api-Key"
rate = "1/h"
burst = 1
shadow = true
"#;
    same_everywhere(d, "shadow", |kind| {
        let seen = run(d, kind, toml, &[("a", "/"); 4]);
        assert!(seen.iter().all(|s| s.0), "{kind:?}: shadow never refuses");
        seen
    });
}

fn a_rollout_enforces_the_same_keys_everywhere(d: &Deployments) {
    let toml = r#"
[[limits]]
name = "new"
key = "header:X-Api-Key"
rate = "1/h"
burst = 1
enforce_percent = 30
"#;
    same_everywhere(d, "rollout", |kind| {
        let e = d.engine(kind, toml);
        // The same 100 keys on every store (the hashing key is shared, and
        // each deployment is its own Redis), so the same ones are enforced;
        // each is asked twice.
        (0..100)
            .flat_map(|n| {
                let key = format!("rollout-{n}");
                [get(&e, &key, "/").unwrap(), get(&e, &key, "/").unwrap()]
            })
            .map(|v| shown(&v))
            .collect()
    });
}

/// A limit of five an hour, all at once, of `algorithm`.
fn five_an_hour(algorithm: AlgorithmKind) -> LimitSpec {
    LimitSpec {
        algorithm,
        rate: Rate::new(5, 3_600 * 1_000_000_000).unwrap(),
        burst: 5,
        nodelay: true,
    }
}

/// One check of `cost` on `key` of `counter`.
fn one_check(counter: &Counter, key: KeyId, cost: u64) -> [Check<'_>; 1] {
    [Check {
        counter,
        key,
        cost,
        reserve: 0,
        lease: None,
    }]
}

/// Refunds on the store seam: charged to empty, part given back, then more
/// than was charged (which fills the limit and no more), on every store,
/// for all six algorithms. Each step shows (allowed, remaining).
fn refunds_give_back_what_was_charged_and_no_more(d: &Deployments) {
    for algorithm in AlgorithmKind::ALL {
        let spec = five_an_hour(algorithm);
        let what = format!("refunds, {}", algorithm.name());
        same_everywhere(d, &what, |kind| {
            let (store, _) = d.stores(kind);
            let def = CounterDef::new(&format!("refund-{}", algorithm.name()), spec).unwrap();
            let counter = store.counter(def);
            let key = hasher().key_id(&fresh_key("refund"));
            let at = |cost| one_check(&counter, key, cost);
            let charge = |cost| {
                let c = block(store.check(&at(cost))).unwrap();
                (c.allowed, c.decisions[0].remaining, false)
            };
            let refund = |cost| {
                let c = block(store.refund(&at(cost))).unwrap();
                (c.allowed, c.decisions[0].remaining, c.fallback().is_some())
            };
            let seen = vec![
                charge(3),
                charge(2),
                charge(1),
                refund(2),
                charge(1),
                charge(1),
                charge(1),
                refund(50),
                charge(5),
            ];
            assert_eq!(
                seen.iter().map(|s| (s.0, s.1)).collect::<Vec<_>>(),
                [
                    (true, 2),
                    (true, 0),
                    (false, 0),
                    (true, 2),
                    (true, 1),
                    (true, 0),
                    (false, 0),
                    (true, 5),
                    (true, 0)
                ],
                "{what} on {kind:?}"
            );
            assert!(
                seen.iter().all(|s| !s.2),
                "{what} on {kind:?}: a fallback took it"
            );
            seen.into_iter()
                .map(|(allowed, remaining, _)| {
                    (
                        allowed,
                        vec![(String::new(), 5, remaining, allowed)],
                        vec![],
                    )
                })
                .collect()
        });
    }
}

/// Debits on the store seam (a cost settled after the response), through
/// each deployment's store as the engine holds it (Redis behind its
/// protection): what a limit has left is charged first, then debt up to
/// `max_debt`, the rest returned as excess; a key in debt refuses even a
/// peek, and a refund pays its debt back first. The same on every store,
/// for all six algorithms, every answer Redis's own.
fn debits_charge_into_debt_on_every_store(d: &Deployments) {
    for algorithm in AlgorithmKind::ALL {
        let spec = five_an_hour(algorithm);
        let what = format!("debits, {}", algorithm.name());
        same_everywhere(d, &what, |kind| {
            let (store, _) = d.stores(kind);
            let def = CounterDef::new(&format!("debit-{}", algorithm.name()), spec).unwrap();
            let counter = store.counter(def);
            let key = hasher().key_id(&fresh_key("debit"));
            let at = |cost| one_check(&counter, key, cost);
            // (allowed, remaining) of a check or refund, (charged,
            // excess) of a debit.
            let check = |cost| {
                let c = block(store.check(&at(cost))).unwrap();
                (u64::from(c.allowed), c.decisions[0].remaining)
            };
            let refund = |cost| {
                let c = block(store.refund(&at(cost))).unwrap();
                (u64::from(c.decisions[0].allowed), c.decisions[0].remaining)
            };
            let debit = |amount, max_debt| {
                let d = block(store.debit(&counter, key, amount, max_debt)).unwrap();
                (d.charged, d.excess)
            };
            let seen = vec![
                check(3),
                debit(4, 3),
                check(0),
                debit(5, 3),
                refund(3),
                refund(2),
            ];
            assert_eq!(
                seen,
                [(1, 2), (4, 0), (0, 0), (1, 4), (1, 0), (1, 2)],
                "{what} on {kind:?}: 2 left, 2 of debt; in debt, a peek is refused; \
                 debt up to 3, the rest excess; the debt refunded first"
            );
            if let Some(h) = store.remote_health() {
                assert_eq!(
                    (h.fallback_decisions, h.store_errors, h.store_timeouts),
                    (0, 0, 0),
                    "{what} on {kind:?}: every answer is the store's"
                );
            }
            seen.into_iter()
                .map(|(a, b)| (a > 0, vec![(String::new(), a, b, true)], vec![]))
                .collect()
        });
    }
}

/// Concurrency slots on the store seam (3 in flight, leases of a minute):
/// taken, refused when none is free, released, taken again; the same on
/// every store, every answer Redis's own. Each step shows (allowed,
/// remaining, reset_after, retry_after).
fn slots_are_taken_refused_and_released_alike(d: &Deployments) {
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Concurrency,
        rate: Rate::new(3, 60 * 1_000_000_000).unwrap(),
        burst: 3,
        nodelay: false,
    };
    same_everywhere(d, "slots", |kind| {
        let (store, _) = d.stores(kind);
        let counter = store.counter(CounterDef::new("slots", spec).unwrap());
        let key = hasher().key_id(&fresh_key("slots"));
        let at = |cost| one_check(&counter, key, cost);
        let show = |c: sluice_store::seam::Checked| {
            let d = c.decisions[0];
            (c.allowed, d.remaining, d.reset_after, d.retry_after)
        };
        let take = |cost| show(block(store.check(&at(cost))).unwrap());
        let release = |cost| show(block(store.refund(&at(cost))).unwrap());
        let (minute, second) = (60_000_000_000, Some(1_000_000_000));
        let seen = vec![take(2), take(1), take(1), release(1), take(1), release(9)];
        assert_eq!(
            seen,
            [
                (true, 1, minute, None),
                (true, 0, minute, None),
                (false, 0, minute, second),
                (true, 1, minute, None),
                (true, 0, minute, None),
                (true, 3, 0, None),
            ],
            "slots on {kind:?}"
        );
        if let Some(h) = store.remote_health() {
            let counts = (h.fallback_decisions, h.store_errors, h.store_timeouts);
            assert_eq!(counts, (0, 0, 0), "slots on {kind:?}: a fallback took it");
        }
        seen.into_iter()
            .map(|(a, r, reset, _)| (a, vec![(String::new(), r, reset, a)], vec![]))
            .collect()
    });
}

/// A fresh client's concurrency state on Cluster is one key, in the slot
/// of the client's hash tag (with its other limits).
fn slots_live_in_the_client_s_slot_on_cluster(d: &Deployments) {
    let (Some(cluster), Some(store)) = (d.cluster(), d.redis_store(Kind::Cluster)) else {
        return;
    };
    let slots = five_an_hour(AlgorithmKind::Concurrency).build().unwrap();
    let bucket = five_an_hour(AlgorithmKind::TokenBucket).build().unwrap();
    let key = hasher().key_id(&fresh_key("slots-cluster"));
    let check = |limit_id, limiter| RedisCheck {
        limit_id,
        limiter,
        key,
        cost: 1,
        reserve: 0,
    };
    let both = [check("c-slots", &slots), check("c-bucket", &bucket)];
    assert!(block(store.check(&both)).unwrap().allowed);
    let slot = cluster.keyslot(&format!("{{{}}}", key.to_hex()));
    let owner = cluster.owner_of(slot, 0).unwrap();
    for id in ["c-slots", "c-bucket"] {
        let name = sluice_redis::key_name(id, key);
        assert_eq!(cluster.keyslot(&name), slot, "{id}: the client's slot");
        let exists = cluster.command(owner, &["EXISTS", &name]);
        assert_eq!(format!("{exists:?}"), "Int(1)", "{id}: held by the owner");
    }
}

/// What one call of a debt run answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Decided(Decision),
    Debited(Debited),
}

/// One call of a debt run: a check (cost 0 peeks), a debit, a refund.
#[derive(Debug, Clone, Copy)]
enum Op {
    Check(u64),
    Debit(u64, u64),
    Refund(u64),
}

/// A debt run: `n` calls at increasing whole microseconds, drawn from
/// `seed` (xorshift), for a limit of burst `burst` and window `window_us`.
fn debt_run(seed: u64, n: usize, burst: u64, window_us: u64) -> Vec<(u64, Op)> {
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t = 0;
    (0..n)
        .map(|_| {
            let r = next();
            t += match r % 4 {
                0 => 0,
                1 => r % 1000,
                _ => (r >> 8) % (window_us * 3 / 2),
            };
            let r = next();
            let op = match r % 8 {
                0..=2 => Op::Check((r >> 8) % (burst + 1)),
                3..=5 => {
                    let max_debt = match (r >> 40) % 3 {
                        0 => 0,
                        1 => u64::MAX,
                        _ => (r >> 48) % (2 * burst + 1),
                    };
                    Op::Debit((r >> 8) % (3 * burst + 2), max_debt)
                }
                _ => Op::Refund((r >> 8) % (2 * burst + 1)),
            };
            (t, op)
        })
        .collect()
}

/// sluice-core's answers to a run (`Limiter` on one state; a refund
/// answered by a peek afterwards, as a store answers it).
fn reference_run(limiter: &Limiter, start_us: u64, run: &[(u64, Op)]) -> Vec<Answer> {
    let mut state = State::default();
    run.iter()
        .map(|&(t, op)| {
            let now = (start_us + t) * 1000;
            match op {
                Op::Check(cost) => {
                    Answer::Decided(limiter.check_and_apply(&mut state, now, cost).unwrap())
                }
                Op::Debit(amount, max_debt) => {
                    Answer::Debited(limiter.debit(&mut state, now, amount, max_debt))
                }
                Op::Refund(amount) => {
                    limiter.refund(&mut state, now, amount);
                    Answer::Decided(limiter.check(&state, now, 0).unwrap().decision)
                }
            }
        })
        .collect()
}

/// A run on the memory store, through the store seam, on a manual clock.
fn memory_run(def: CounterDef, start_us: u64, run: &[(u64, Op)]) -> Vec<Answer> {
    let clock = ManualClock::new(start_us * 1000);
    let store = MemoryStore::with_clock(Default::default(), clock.clone());
    let counter = store.counter(def);
    let key = hasher().key_id(&fresh_key("debt-run"));
    run.iter()
        .map(|&(t, op)| {
            clock.set((start_us + t) * 1000);
            match op {
                Op::Check(cost) => {
                    let c = now_or_never(Store::check(&store, &one_check(&counter, key, cost)));
                    Answer::Decided(c.unwrap().unwrap().decisions[0])
                }
                Op::Debit(amount, max_debt) => {
                    let d = now_or_never(Store::debit(&store, &counter, key, amount, max_debt));
                    Answer::Debited(d.unwrap().unwrap())
                }
                Op::Refund(amount) => {
                    let c = now_or_never(Store::refund(&store, &one_check(&counter, key, amount)));
                    Answer::Decided(c.unwrap().unwrap().decisions[0])
                }
            }
        })
        .collect()
}

/// A run on a Redis deployment's store, at the run's times.
fn redis_run(
    store: &RedisStore,
    limiter: &Limiter,
    start_us: u64,
    run: &[(u64, Op)],
) -> Vec<Answer> {
    let id = fresh_key("debt-run");
    let key = hasher().key_id(&fresh_key("debt-run"));
    let check = |cost| RedisCheck {
        limit_id: &id,
        limiter,
        key,
        cost,
        reserve: 0,
    };
    run.iter()
        .map(|&(t, op)| {
            let now = start_us + t;
            match op {
                Op::Check(cost) => {
                    let c = block(store.check_at(&[check(cost)], now)).unwrap();
                    Answer::Decided(c.decisions[0])
                }
                Op::Debit(amount, max_debt) => {
                    Answer::Debited(block(store.debit_at(&check(amount), max_debt, now)).unwrap())
                }
                Op::Refund(amount) => {
                    let c = block(store.refund_at(&[check(amount)], now)).unwrap();
                    Answer::Decided(c.decisions[0])
                }
            }
        })
        .collect()
}

/// Random runs of checks, debits (various `max_debt`) and refunds at
/// controlled times, for every algorithm, debt forgiven or not: on every
/// deployment (the memory store through the seam, each Redis one through
/// its store's `*_at` calls), every decision and every `Debited`, call by
/// call, is sluice-core's.
fn debt_runs_equal_sluice_core_everywhere(d: &Deployments) {
    // 4/s with burst 4: windows of a second (a whole number of
    // microseconds, as a sliding log on Redis needs to take debits).
    let (burst, window_us) = (4, 1_000_000);
    let start_us = 1_750_000_000_000_000;
    for kind in d.kinds() {
        let redis = d.redis_store(kind);
        for algorithm in AlgorithmKind::ALL {
            let spec = LimitSpec {
                algorithm,
                rate: Rate::per_second(4),
                burst,
                nodelay: true,
            };
            for forgive in [false, true] {
                let def = CounterDef::new("debt-run", spec)
                    .unwrap()
                    .with_debt_forgiven(forgive);
                let limiter = *def.limiter();
                for seed in 1..=3u64 {
                    let run = debt_run(seed * 7919 + algorithm as u64, 60, burst, window_us);
                    let want = reference_run(&limiter, start_us, &run);
                    let got = match &redis {
                        None => memory_run(def.clone(), start_us, &run),
                        Some(store) => redis_run(store, &limiter, start_us, &run),
                    };
                    for (i, ((g, w), (t, op))) in got.iter().zip(&want).zip(&run).enumerate() {
                        assert_eq!(
                            g, w,
                            "{kind:?}, {algorithm:?}, forgiven {forgive}, seed {seed}: call {i} \
                             ({op:?} at +{t} us) against sluice-core"
                        );
                    }
                }
            }
        }
    }
}

/// One test, so that the Redis processes are started once and stopped at
/// its end; each scenario names what it checks when it fails.
#[test]
fn every_store_decides_alike() {
    let d = Deployments::start();
    every_algorithm_admits_its_burst_and_refuses_the_rest(&d);
    a_request_over_any_limit_charges_none(&d);
    classes_keep_their_share(&d);
    a_class_refusal_shows_every_limit_that_refuses(&d);
    delay_holds_what_fits_and_refuses_the_rest(&d);
    credits_pay_for_what_the_plan_refuses(&d);
    a_plan_change_carries_the_used_share_over(&d);
    shadow_limits_record_and_never_refuse(&d);
    a_rollout_enforces_the_same_keys_everywhere(&d);
    refunds_give_back_what_was_charged_and_no_more(&d);
    debits_charge_into_debt_on_every_store(&d);
    debt_runs_equal_sluice_core_everywhere(&d);
    slots_are_taken_refused_and_released_alike(&d);
    slots_live_in_the_client_s_slot_on_cluster(&d);
    leases::leases_end_by_themselves_and_free_only_their_own(&d);
}
