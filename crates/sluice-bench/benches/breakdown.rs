//! Where a keyed decision's time goes: its parts alone, on the engine
//! benchmark's limit and IPv4 clients picked uniformly, beside governor's
//! keyed check in the same run. With 100,000 clients the table does not fit
//! in the core's caches; with 1,000 it does.
//!
//! `cargo bench -p sluice-bench --bench breakdown`
//!
//! The parts: the key's id alone (`KeyHasher::key_id_v4` under the memory
//! store's random hasher: two seeded foldhash halves), the memory store's check of an id
//! computed beforehand (`Store::check_one_now`, as the engine asks it), the
//! two together, and the engine's whole call (`Engine::decide_now`).

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use http::HeaderMap;
use sluice_bench::engine_workload::{KEYS, ONE_LIMIT, admits, governor_keyed, ip};
use sluice_bench::uniform_keys;
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_policy::{Engine, Policy};
use sluice_store::seam::{Check, CounterDef, Store};
use sluice_store::{KeyHasher, KeyId, MemoryStore, MemoryStoreConfig};

const SEQ: usize = 1 << 20;

/// The id the engine gives a peer address.
fn v4_id(h: &KeyHasher, ip: IpAddr) -> KeyId {
    match ip {
        IpAddr::V4(v4) => h.key_id_v4(v4, || ip.to_string()),
        IpAddr::V6(_) => h.key_id(&ip.to_string()),
    }
}

/// Both sizes of the client set, and a flood of new clients.
fn breakdown(c: &mut Criterion) {
    run(c, "breakdown_uniform_100k", KEYS);
    run(c, "breakdown_uniform_1k", 1000);
    flood(c);
}

/// The memory store's check of a client never seen before, its limit full
/// (`max_keys` 100,000, a token bucket of 10/s as in the key-flood test):
/// each check inserts a key, and every so often a shard makes room.
fn flood(c: &mut Criterion) {
    let mut g = c.benchmark_group("breakdown_flood");
    g.throughput(Throughput::Elements(1));
    let spec = LimitSpec {
        algorithm: AlgorithmKind::TokenBucket,
        rate: Rate::per_second(10),
        burst: 20,
        nodelay: false,
    };
    let store = MemoryStore::new(MemoryStoreConfig {
        max_keys: 100_000,
        shards: 0,
    });
    let counter = store.counter(CounterDef::new("flood", spec).unwrap());
    let hasher = KeyHasher::random();
    let mut n = 0u64;
    let mut new_key = || {
        n += 1;
        let c = Check {
            counter: &counter,
            key: hasher.key_id_bytes(&n.to_le_bytes()),
            cost: 1,
            reserve: 0,
            lease: None,
        };
        matches!(store.check_one_now(&c), Some(Ok(d)) if d.allowed)
    };
    for _ in 0..200_000 {
        new_key();
    }
    g.bench_function("store_new_key_at_the_cap", |b| {
        b.iter(|| black_box(new_key()))
    });
    g.finish();
}

/// One client set: `keys` clients, each warmed, then checked uniformly.
fn run(c: &mut Criterion, group: &str, keys: u64) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    let seq: Vec<IpAddr> = uniform_keys(keys, SEQ, 42).into_iter().map(ip).collect();
    let gov = governor_keyed(keys);
    let mut i = 0;
    g.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(gov.check_key(&seq[i]).is_ok())
        })
    });

    let hasher = KeyHasher::random();
    let mut i = 0;
    g.bench_function("key_id_only", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(v4_id(&hasher, seq[i]))
        })
    });

    let spec = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(1000),
        burst: 1000,
        nodelay: false,
    };
    let store = MemoryStore::new(MemoryStoreConfig::default());
    let counter = store.counter(CounterDef::new("bench", spec).unwrap());
    let ids: Vec<KeyId> = seq.iter().map(|&p| v4_id(&hasher, p)).collect();
    let check = |key| {
        let c = Check {
            counter: &counter,
            key,
            cost: 1,
            reserve: 0,
            lease: None,
        };
        matches!(store.check_one_now(&c), Some(Ok(d)) if d.allowed)
    };
    for k in 0..keys {
        check(v4_id(&hasher, ip(k)));
    }
    let mut i = 0;
    g.bench_function("store_check_known_id", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(check(ids[i]))
        })
    });
    let mut i = 0;
    g.bench_function("store_check_with_id", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(check(v4_id(&hasher, seq[i])))
        })
    });

    let engine = Engine::new(Policy::from_toml("bench.toml", ONE_LIMIT).unwrap());
    let headers = HeaderMap::new();
    for k in 0..keys {
        admits(&engine, &headers, ip(k));
    }
    let mut i = 0;
    g.bench_function("engine", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(admits(&engine, &headers, seq[i]))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    targets = breakdown
}
criterion_main!(benches);
