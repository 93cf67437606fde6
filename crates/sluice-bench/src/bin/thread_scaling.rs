//! Keyed checks on 1 and 2 threads: the memory store's check of one key
//! (its id included) beside governor's keyed `check_key`, uniform and Zipf
//! (issue 30's in-process floor), Sluice's `KeyedLimiter` and the
//! engine's decision call (`Engine::decide_now`, one limit keyed by client
//! IP, as `benches/engine.rs`) beside governor's keyed limiter; one state
//! for every request (the engine's call on one global limit) beside
//! governor's direct limiter; a global cap beside the per-IP limit (two
//! limits, all or nothing, no peer); with a compute-only loop as a
//! control: the best
//! of many short runs, for a machine shared with other work (where
//! criterion's thread rows mostly measure the other work).
//!
//! `cargo run --release -p sluice-bench --bin thread_scaling [ROUNDS]`
//!
//! Read the scaling of each limiter against the control's: when the
//! control is well under 2×, the two threads seldom ran at once.

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Instant;

use sluice_bench::engine_workload::{GLOBAL_AND_IP, ONE_LIMIT};
use sluice_bench::{uniform_keys, zipf_keys};
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_store::KeyedLimiter;

const KEYS: u64 = 100_000;
const SEQ: usize = 1 << 20;
/// Checks per run, split over the threads: a few milliseconds.
const CHECKS: usize = 400_000;

type Check = Arc<dyn Fn(usize) -> bool + Send + Sync>;

/// Runs `CHECKS` checks over `threads` threads (thread `t` starting at
/// `t * 7919` in the key sequence, as the criterion bench does); returns
/// the wall time per check in ns.
fn run(threads: usize, check: &Check) -> f64 {
    let per = CHECKS / threads;
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let check = check.clone();
            std::thread::spawn(move || {
                for i in 0..per {
                    // Each thread reads its own stretch of the uniform sequence:
                    // independent streams of keys, as from different clients.
                    black_box(check(i + t * (SEQ / 2)));
                }
            })
        })
        .collect();
    for h in handles {
        let _ = h.join();
    }
    start.elapsed().as_nanos() as f64 / CHECKS as f64
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(150);
    let keys = Arc::new(uniform_keys(KEYS, SEQ, 42));
    let zipf = Arc::new(zipf_keys(KEYS, SEQ, 1.0, 42));
    let Some((governor, sluice)) = keyed(&keys) else {
        return;
    };
    let Some((governor_zipf, _)) = keyed(&zipf) else {
        return;
    };
    let (global, direct) = one_state();
    let control: Check = Arc::new(|i| {
        let mut x = i as u64;
        for _ in 0..20 {
            x = x.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (x >> 29);
        }
        x & 1 == 0
    });
    let subjects = [
        (
            "Sluice MemoryStore GCRA (id + check), uniform",
            store(&keys),
        ),
        ("governor keyed, uniform", governor),
        ("Sluice MemoryStore GCRA (id + check), Zipf", store(&zipf)),
        ("governor keyed, Zipf", governor_zipf),
        ("Sluice KeyedLimiter GCRA", sluice),
        (
            "Sluice engine, per-IP limit",
            engine_per_ip(&keys, ONE_LIMIT),
        ),
        (
            "Sluice engine, global cap beside per-IP limit",
            engine_per_ip(&keys, GLOBAL_AND_IP),
        ),
        ("Sluice engine, one global limit", global),
        ("governor direct", direct),
        ("control (compute only)", control),
    ];
    let mut best = vec![[f64::MAX; 2]; subjects.len()];
    for _ in 0..rounds {
        for (s, (_, check)) in subjects.iter().enumerate() {
            for threads in [1, 2] {
                let ns = run(threads, check);
                best[s][threads - 1] = best[s][threads - 1].min(ns);
            }
        }
    }
    println!("best of {rounds} runs of {CHECKS} checks");
    println!("| subject | 1 thread (ns/check) | 2 threads (ns/check) | 2 threads / 1 thread |");
    println!("|---|---:|---:|---:|");
    for (s, (name, _)) in subjects.iter().enumerate() {
        let [one, two] = best[s];
        println!("| {name} | {one:.1} | {two:.1} | {:.2}× |", one / two);
    }
}

/// governor's keyed limiter and Sluice's `KeyedLimiter` on the same
/// quota, every key checked once.
fn keyed(keys: &Arc<Vec<u64>>) -> Option<(Check, Check)> {
    let (rate, burst) = (NonZeroU32::new(1000)?, NonZeroU32::new(1000)?);
    let gov = Arc::new(governor::RateLimiter::keyed(
        governor::Quota::per_second(rate).allow_burst(burst),
    ));
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(1000),
        burst: 1000,
        nodelay: true,
    };
    let keyed = Arc::new(KeyedLimiter::<u64>::new(&spec, 1_000_000).ok()?);
    for k in 0..KEYS {
        let _ = gov.check_key(&k);
        let _ = keyed.check(&k, 1);
    }
    let k = keys.clone();
    let governor: Check = Arc::new(move |i| gov.check_key(&k[i & (SEQ - 1)]).is_ok());
    let k = keys.clone();
    let sluice: Check =
        Arc::new(move |i| keyed.check(&k[i & (SEQ - 1)], 1).is_ok_and(|d| d.allowed));
    Some((governor, sluice))
}

/// The memory store's check of one key, its id derived each time under
/// the store's random hasher, through the seam as the engine asks it (a
/// registered counter, `Store::check_one_now`), every key checked once:
/// the same work as governor's keyed `check_key`.
fn store(keys: &Arc<Vec<u64>>) -> Check {
    use sluice_store::seam::{self, CounterDef, Store};
    let store = sluice_store::MemoryStore::new(sluice_store::MemoryStoreConfig::default());
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(1000),
        burst: 1000,
        nodelay: true,
    };
    let counter = store.counter(CounterDef::new("bench", spec).expect("the bench limit"));
    let hasher = sluice_store::KeyHasher::random();
    let check = move |k: u64| {
        let check = seam::Check {
            counter: &counter,
            key: hasher.key_id_bytes(&k.to_le_bytes()),
            cost: 1,
            reserve: 0,
            lease: None,
        };
        matches!(store.check_one_now(&check), Some(Ok(d)) if d.allowed)
    };
    for k in 0..KEYS {
        check(k);
    }
    let k = keys.clone();
    Arc::new(move |i| check(k[i & (SEQ - 1)]))
}

/// The engine's call on a policy of the per-IP limit (`config`), every
/// client seen once.
fn engine_per_ip(keys: &Arc<Vec<u64>>, config: &str) -> Check {
    let engine = sluice_policy::Engine::new(
        sluice_policy::Policy::from_toml("bench.toml", config).expect("the bench config"),
    );
    let headers = http::HeaderMap::new();
    for k in 0..KEYS {
        sluice_bench::engine_workload::admits(
            &engine,
            &headers,
            sluice_bench::engine_workload::ip(k),
        );
    }
    let engine = Arc::new((engine, headers));
    let k = keys.clone();
    Arc::new(move |i| {
        let ip = sluice_bench::engine_workload::ip(k[i & (SEQ - 1)]);
        sluice_bench::engine_workload::admits(&engine.0, &engine.1, ip)
    })
}

/// One state for every request, on both threads: a global limit, and
/// governor's direct limiter of the same quota (most checks refused once
/// the burst is spent, on both sides).
fn one_state() -> (Check, Check) {
    let global = sluice_policy::Engine::new(
        sluice_policy::Policy::from_toml("bench.toml", sluice_bench::engine_workload::ONE_GLOBAL)
            .expect("the bench config"),
    );
    let global = Arc::new((global, http::HeaderMap::new()));
    let global: Check = Arc::new(move |i| {
        let ip = sluice_bench::engine_workload::ip(i as u64);
        sluice_bench::engine_workload::admits(&global.0, &global.1, ip)
    });
    let direct = governor::RateLimiter::direct(sluice_bench::engine_workload::governor_quota());
    (global, Arc::new(move |_| direct.check().is_ok()))
}
