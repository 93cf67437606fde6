//! Sluice's in-process checks beside governor 0.10, in one run.
//!
//! `cargo bench -p sluice-bench --bench in_process`
//!
//! Both limiters get the same quota (GCRA / token bucket, 1000/s, burst
//! 1000 per key) and the same key sequences (`u64`, or 16-byte arrays).
//! Like with like: `sluice_keyed_*` is Sluice's `KeyedLimiter<K>`, which,
//! like governor's keyed `RateLimiter<K>` (a `DashMap<K, AtomicU64>` hashed
//! with SipHash-1-3), is handed the key itself, keeps it, and compares it on
//! lookup; it hashes it with a randomly seeded foldhash. `sluice_store_gcra`
//! is the store part of the policy engine's path: the caller derives the
//! 128-bit keyed id of the key's bytes (`KeyHasher::random`, as the
//! engine's in-memory store: two seeded foldhash halves) and
//! `MemoryStore::check_one` looks it up (the store never holds raw keys).

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use sluice_bench::{uniform_keys, zipf_keys};
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_store::{
    Check, DirectLimiter, KeyHasher, KeyId, KeyedLimiter, Limit, MemoryStore, MemoryStoreConfig,
};

const KEYS: u64 = 100_000;
const SEQ: usize = 1 << 20;

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(1000).unwrap()).allow_burst(NonZeroU32::new(1000).unwrap())
}

fn spec(algorithm: AlgorithmKind) -> LimitSpec {
    LimitSpec {
        algorithm,
        rate: Rate::per_second(1000),
        burst: 1000,
        nodelay: true,
    }
}

fn sluice(algorithm: AlgorithmKind) -> (Arc<MemoryStore>, Arc<Limit>) {
    let store = Arc::new(MemoryStore::new(MemoryStoreConfig::default()));
    let limit = store.limit("bench", spec(algorithm).build().unwrap());
    (store, limit)
}

fn single_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("single_key");
    g.throughput(Throughput::Elements(1));
    let gov = RateLimiter::direct(quota());
    g.bench_function("governor_direct", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
    let direct = DirectLimiter::new(&LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(1000),
        burst: 1000,
        nodelay: true,
    })
    .unwrap();
    assert!(direct.is_lock_free());
    g.bench_function("sluice_direct_gcra", |b| {
        b.iter(|| black_box(direct.check(1).map(|d| d.allowed)))
    });
    // A control: the clock read alone, which both limiters make per check.
    let clock = sluice_core::SystemClock::new();
    g.bench_function("clock_read_only", |b| {
        b.iter(|| black_box(sluice_core::Clock::now(&clock)))
    });
    {
        let (store, limit) = sluice(AlgorithmKind::Gcra);
        let key = KeyHasher::random().key_id("global");
        g.bench_function("sluice_gcra", |b| {
            b.iter(|| {
                let c = Check {
                    limit: &limit,
                    key,
                    cost: 1,
                };
                black_box(store.check_one(&c).map(|d| d.allowed))
            })
        });
    }
    g.finish();
}

/// Both limiters over the key universe `names`, checked in the order
/// `picks` (indexes into `names`). `id` is how Sluice hashes one key.
///
/// The keys are laid out in check order beforehand (`seq`) and read
/// sequentially, as a server reads each request's key from the request it
/// has just parsed: a check does not first fetch its key from a table of all
/// keys, a cache miss that belongs to neither limiter.
fn keyed<K>(
    c: &mut Criterion,
    group: &str,
    names: &[K],
    picks: &[u64],
    id: impl Fn(&KeyHasher, &K) -> KeyId,
) where
    K: std::hash::Hash + Eq + Clone,
{
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    let seq: Vec<K> = picks.iter().map(|p| names[*p as usize].clone()).collect();
    let pick = |i: usize| &seq[i];
    let gov = RateLimiter::keyed(quota());
    for n in names {
        let _ = gov.check_key(n);
    }
    let mut i = 0;
    g.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(gov.check_key(pick(i)).is_ok())
        })
    });
    for alg in [AlgorithmKind::Gcra, AlgorithmKind::TokenBucket] {
        let keyed = KeyedLimiter::<K>::new(&spec(alg), 1_000_000).unwrap();
        assert!(keyed.is_lock_free());
        for n in names {
            let _ = keyed.check(n, 1);
        }
        let mut i = 0;
        g.bench_function(format!("sluice_keyed_{}", alg.name()), |b| {
            b.iter(|| {
                i = (i + 1) & (SEQ - 1);
                black_box(keyed.check(pick(i), 1).map(|d| d.allowed))
            })
        });
    }
    let (store, limit) = sluice(AlgorithmKind::Gcra);
    let hasher = KeyHasher::random();
    let check = |key| {
        store.check_one(&Check {
            limit: &limit,
            key,
            cost: 1,
        })
    };
    for n in names {
        let _ = check(id(&hasher, n));
    }
    let mut i = 0;
    g.bench_function("sluice_store_gcra", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(check(id(&hasher, pick(i))).map(|d| d.allowed))
        })
    });
    g.finish();
}

/// `u64` keys `0..KEYS`.
fn u64_keys() -> Vec<u64> {
    (0..KEYS).collect()
}

fn u64_id(h: &KeyHasher, k: &u64) -> KeyId {
    h.key_id_bytes(&k.to_le_bytes())
}

/// 16-byte API-key-like keys (`b"key-000000012345"`), held inline in one
/// array so that reading a key costs both sides the same. governor keys its
/// map by `[u8; 16]`; Sluice hashes the 16 bytes.
fn api_keys() -> Vec<[u8; 16]> {
    (0..KEYS)
        .map(|k| {
            let mut b = [0u8; 16];
            b.copy_from_slice(format!("key-{k:012}").as_bytes());
            b
        })
        .collect()
}

fn api_key_id(h: &KeyHasher, k: &[u8; 16]) -> KeyId {
    h.key_id_bytes(k)
}

fn keyed_uniform(c: &mut Criterion) {
    keyed(
        c,
        "keyed_uniform_100k",
        &u64_keys(),
        &uniform_keys(KEYS, SEQ, 42),
        u64_id,
    );
}

fn keyed_zipf(c: &mut Criterion) {
    keyed(
        c,
        "keyed_zipf_100k",
        &u64_keys(),
        &zipf_keys(KEYS, SEQ, 1.0, 42),
        u64_id,
    );
}

fn keyed_uniform_strings(c: &mut Criterion) {
    keyed(
        c,
        "keyed_uniform_100k_apikeys",
        &api_keys(),
        &uniform_keys(KEYS, SEQ, 42),
        api_key_id,
    );
}

fn keyed_zipf_strings(c: &mut Criterion) {
    keyed(
        c,
        "keyed_zipf_100k_apikeys",
        &api_keys(),
        &zipf_keys(KEYS, SEQ, 1.0, 42),
        api_key_id,
    );
}
/// Runs `iters` checks split over `threads` threads; returns the wall time.
fn parallel(threads: usize, iters: u64, check: Arc<dyn Fn(u64) -> bool + Send + Sync>) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let check = check.clone();
            let per = iters / threads as u64;
            std::thread::spawn(move || {
                // Each thread reads its own stretch of the key sequence:
                // independent streams, as from different clients.
                let offset = t as u64 * (SEQ as u64 / 2);
                for i in 0..per {
                    black_box(check(i + offset));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    start.elapsed()
}

fn keyed_threads(c: &mut Criterion) {
    let keys = Arc::new(uniform_keys(KEYS, SEQ, 42));
    let mut g = c.benchmark_group("keyed_uniform_100k_threads");
    g.throughput(Throughput::Elements(1));
    let gov = Arc::new(RateLimiter::keyed(quota()));
    let keyed = Arc::new(KeyedLimiter::<u64>::new(&spec(AlgorithmKind::Gcra), 1_000_000).unwrap());
    let (store, limit) = sluice(AlgorithmKind::Gcra);
    let hasher = KeyHasher::random();
    for k in 0..KEYS {
        let _ = gov.check_key(&k);
        let _ = keyed.check(&k, 1);
        let _ = store.check_one(&Check {
            limit: &limit,
            key: hasher.key_id_bytes(&k.to_le_bytes()),
            cost: 1,
        });
    }
    for threads in [1, 2] {
        let (gov, keys2) = (gov.clone(), keys.clone());
        let gov_check: Arc<dyn Fn(u64) -> bool + Send + Sync> =
            Arc::new(move |i| gov.check_key(&keys2[(i as usize) & (SEQ - 1)]).is_ok());
        g.bench_function(format!("governor_keyed/{threads}"), |b| {
            b.iter_custom(|iters| parallel(threads, iters, gov_check.clone()))
        });
        let (keyed, keys2) = (keyed.clone(), keys.clone());
        let keyed_check: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(move |i| {
            keyed
                .check(&keys2[(i as usize) & (SEQ - 1)], 1)
                .is_ok_and(|d| d.allowed)
        });
        g.bench_function(format!("sluice_keyed_gcra/{threads}"), |b| {
            b.iter_custom(|iters| parallel(threads, iters, keyed_check.clone()))
        });
        let (store, limit, hasher, keys2) =
            (store.clone(), limit.clone(), hasher.clone(), keys.clone());
        let sluice_check: Arc<dyn Fn(u64) -> bool + Send + Sync> = Arc::new(move |i| {
            let key = hasher.key_id_bytes(&keys2[(i as usize) & (SEQ - 1)].to_le_bytes());
            store
                .check_one(&Check {
                    limit: &limit,
                    key,
                    cost: 1,
                })
                .is_ok_and(|d| d.allowed)
        });
        g.bench_function(format!("sluice_store_gcra/{threads}"), |b| {
            b.iter_custom(|iters| parallel(threads, iters, sluice_check.clone()))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = single_key, keyed_uniform, keyed_zipf, keyed_uniform_strings, keyed_zipf_strings, keyed_threads
}
criterion_main!(benches);
