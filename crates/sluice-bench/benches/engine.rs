//! The engine's public decision call beside governor's keyed limiter, in
//! one run: the path `sluice serve` and the tower layer run.
//!
//! `cargo bench -p sluice-bench --bench engine`
//!
//! One limit (GCRA, 1000/s, burst 1000 per key) keyed by client IP, over
//! 100,000 IPv4 clients picked uniformly or Zipf-like. Sluice's side is
//! `Engine::decide_now` on a `RequestInfo` (method, path, headers, peer),
//! which does everything a request needs: the canonical path, the policy's
//! resolution of the limits, the keyed hash of the client key, the store's
//! check and the verdict. governor's side is `check_key` with the same
//! `IpAddr`s, which it hashes and compares itself.

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use http::{HeaderMap, Method};
use sluice_bench::engine_workload::{KEYS, ONE_GLOBAL, ONE_LIMIT, admits, governor_keyed, ip};
use sluice_bench::{uniform_keys, zipf_keys};
use sluice_policy::{Engine, Policy, RequestInfo};

const SEQ: usize = 1 << 20;

fn keyed(c: &mut Criterion, group: &str, picks: &[u64]) {
    let mut g = c.benchmark_group(group);
    g.throughput(Throughput::Elements(1));
    let seq: Vec<IpAddr> = picks.iter().map(|&k| ip(k)).collect();

    let gov = governor_keyed(KEYS);
    let mut i = 0;
    g.bench_function("governor_keyed", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(gov.check_key(&seq[i]).is_ok())
        })
    });

    let engine = Engine::new(Policy::from_toml("bench.toml", ONE_LIMIT).unwrap());
    let headers = HeaderMap::new();
    let decide = |peer: IpAddr| admits(&engine, &headers, peer);
    for k in 0..KEYS {
        decide(ip(k));
    }
    let mut i = 0;
    g.bench_function("sluice_engine", |b| {
        b.iter(|| {
            i = (i + 1) & (SEQ - 1);
            black_box(decide(seq[i]))
        })
    });
    g.finish();
}

fn single_key(c: &mut Criterion) {
    let mut g = c.benchmark_group("engine_single_key");
    g.throughput(Throughput::Elements(1));
    let quota = Quota::per_second(NonZeroU32::new(1000).unwrap())
        .allow_burst(NonZeroU32::new(1000).unwrap());
    let gov = RateLimiter::direct(quota);
    g.bench_function("governor_direct", |b| {
        b.iter(|| black_box(gov.check().is_ok()))
    });
    let (method, headers) = (Method::GET, HeaderMap::new());
    let req = RequestInfo {
        method: &method,
        path: "/",
        headers: &headers,
        peer: Some(ip(7)),
        cost: None,
        body: None,
    };
    // One limit for every request: one key, as governor's direct limiter
    // is one state.
    let global = Engine::new(Policy::from_toml("bench.toml", ONE_GLOBAL).unwrap());
    g.bench_function("sluice_engine", |b| {
        b.iter(|| black_box(matches!(global.decide_now(&req), Some(Ok(_)))))
    });
    // One client of the per-IP limit: its key hashed on every request.
    let per_ip = Engine::new(Policy::from_toml("bench.toml", ONE_LIMIT).unwrap());
    g.bench_function("sluice_engine_one_client", |b| {
        b.iter(|| black_box(matches!(per_ip.decide_now(&req), Some(Ok(_)))))
    });
    g.finish();
}

fn uniform(c: &mut Criterion) {
    keyed(c, "engine_uniform_100k", &uniform_keys(KEYS, SEQ, 42));
}

fn zipf(c: &mut Criterion) {
    keyed(c, "engine_zipf_100k", &zipf_keys(KEYS, SEQ, 1.0, 42));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    targets = single_key, uniform, zipf
}
criterion_main!(benches);
