//! One workload of `benches/engine.rs`, run alone, for counting its
//! instructions with callgrind (a figure that other load on the machine
//! does not move):
//!
//! ```text
//! cargo build --release -p sluice-bench --bin engine_instructions
//! valgrind --tool=callgrind --toggle-collect='*measured*' \
//!     target/release/engine_instructions WORKLOAD
//! ```
//!
//! WORKLOAD is `governor_direct`, `engine_global` (one limit for every
//! request: one key), `engine_single` (one client of the per-IP limit),
//! `governor_keyed`, `governor_zipf`, `engine_zipf` (the same clients
//! picked Zipf-like),
//! `engine_keyed` (100,000 IPv4 clients, uniform), `engine_two` (the
//! same clients under the tower-layer benchmark's two limits, per IP and
//! per API key, one key for all), or `keyed_limiter`:
//! the standalone `KeyedLimiter` on the same clients, the store part of
//! a decision alone, for comparison; or `memory_store`: the memory
//! store's check of one key id as the engine asks it (the address's keyed
//! id, then `Store::check_one_now` on a registered counter). Each does 100,000
//! warm-up decisions (every key once) outside the counted function, then
//! 200,000 inside it: the instructions per decision are callgrind's total
//! over 200,000.

use std::hint::black_box;
use std::net::IpAddr;
use std::num::NonZeroU32;

use governor::{Quota, RateLimiter};
use http::HeaderMap;
use sluice_bench::engine_workload::{KEYS, ONE_GLOBAL, ONE_LIMIT, admits, ip};
use sluice_bench::{uniform_keys, zipf_keys};
use sluice_policy::{Engine, Policy};

const COUNTED: usize = 200_000;

/// The counted loop: `decide` once per address.
#[inline(never)]
fn measured(seq: &[IpAddr], decide: &dyn Fn(IpAddr) -> bool) -> usize {
    seq.iter().filter(|&&ip| decide(black_box(ip))).count()
}

/// The store part of a decision alone, on the same limit: the standalone
/// `KeyedLimiter`, and the memory store's check of the address's keyed id.
type Check = Box<dyn Fn(IpAddr) -> bool>;

fn store_checks() -> (Check, Check) {
    let spec = sluice_core::LimitSpec {
        algorithm: sluice_core::AlgorithmKind::Gcra,
        rate: sluice_core::Rate::per_second(1000),
        burst: 1000,
        nodelay: false,
    };
    let standalone =
        sluice_store::KeyedLimiter::<IpAddr>::new(&spec, 1_000_000).expect("a valid limit");
    let keyed_limiter = move |ip: IpAddr| standalone.check(&ip, 1).is_ok_and(|d| d.allowed);
    // Through the seam, as the engine asks it: a registered counter and
    // `check_one_now`.
    let store = sluice_store::MemoryStore::new(sluice_store::MemoryStoreConfig::default());
    let def = sluice_store::seam::CounterDef::new("bench", spec).expect("a valid limit");
    let counter = sluice_store::seam::Store::counter(&store, def);
    let hasher = sluice_store::KeyHasher::random();
    let memory_store = move |ip: IpAddr| {
        let key = match ip {
            IpAddr::V4(v4) => hasher.key_id_v4(v4, || ip.to_string()),
            IpAddr::V6(_) => hasher.key_id(&ip.to_string()),
        };
        let check = sluice_store::seam::Check {
            counter: &counter,
            key,
            cost: 1,
            reserve: 0,
            lease: None,
        };
        let answer = sluice_store::seam::Store::check_one_now(&store, &check);
        matches!(answer, Some(Ok(d)) if d.allowed)
    };
    (Box::new(keyed_limiter), Box::new(memory_store))
}

fn main() {
    let workload = std::env::args().nth(1).unwrap_or_default();
    let quota = Quota::per_second(NonZeroU32::new(1000).unwrap_or(NonZeroU32::MIN))
        .allow_burst(NonZeroU32::new(1000).unwrap_or(NonZeroU32::MIN));
    let keyed: Vec<IpAddr> = uniform_keys(KEYS, COUNTED, 42)
        .into_iter()
        .map(ip)
        .collect();
    let zipf: Vec<IpAddr> = zipf_keys(KEYS, COUNTED, 1.0, 42)
        .into_iter()
        .map(ip)
        .collect();
    let single = vec![ip(7); COUNTED];
    let warm: Vec<IpAddr> = (0..KEYS).map(ip).collect();

    let engine = Engine::new(Policy::from_toml("bench.toml", ONE_LIMIT).expect("config"));
    let headers = HeaderMap::new();
    let engine_decide = |peer: IpAddr| admits(&engine, &headers, peer);
    let global = Engine::new(Policy::from_toml("bench.toml", ONE_GLOBAL).expect("config"));
    let engine_global = |peer: IpAddr| admits(&global, &headers, peer);
    // Two limits, as the tower layer's benchmark has them: per client IP
    // and per API key (every request with the same key).
    let two = Engine::new(
        Policy::from_toml("bench.toml", sluice_bench::layer_configs::TWO_LIMITS).expect("config"),
    );
    let mut with_key = HeaderMap::new();
    with_key.insert("x-api-key", http::HeaderValue::from_static("bench-key"));
    let engine_two = |peer: IpAddr| admits(&two, &with_key, peer);
    let direct = RateLimiter::direct(quota);
    let governor_direct = |_: IpAddr| direct.check().is_ok();
    let by_key = RateLimiter::keyed(quota);
    let governor_keyed = |ip: IpAddr| by_key.check_key(&ip).is_ok();
    let (keyed_limiter, memory_store) = store_checks();

    let (decide, seq): (&dyn Fn(IpAddr) -> bool, &[IpAddr]) = match workload.as_str() {
        "governor_direct" => (&governor_direct, &single),
        "engine_global" => (&engine_global, &single),
        "engine_single" => (&engine_decide, &single),
        "governor_keyed" => (&governor_keyed, &keyed),
        "engine_keyed" => (&engine_decide, &keyed),
        "engine_two" => (&engine_two, &keyed),
        "governor_zipf" => (&governor_keyed, &zipf),
        "engine_zipf" => (&engine_decide, &zipf),
        "keyed_limiter" => (&*keyed_limiter, &keyed),
        "memory_store" => (&*memory_store, &keyed),
        _ => {
            eprintln!(
                "usage: engine_instructions governor_direct|engine_global|engine_single|governor_keyed|engine_keyed|engine_two|governor_zipf|engine_zipf|keyed_limiter|memory_store"
            );
            std::process::exit(2);
        }
    };
    for &ip in &warm {
        decide(ip);
    }
    let admitted = measured(seq, decide);
    println!("{workload}: {admitted} of {COUNTED} admitted");
}
