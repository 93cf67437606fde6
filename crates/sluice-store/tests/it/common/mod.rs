//! Helpers shared by the store's concurrency tests and model check.

#![allow(dead_code)]

use sluice_core::{AlgorithmKind, LimitSpec, Limiter, ManualClock, Rate};
use sluice_store::{Check, KeyHasher, KeyId, Limit, MemoryStore, MemoryStoreConfig};

/// One second in nanoseconds.
pub const SEC: u64 = 1_000_000_000;

/// Every algorithm.
pub const KINDS: [AlgorithmKind; 6] = AlgorithmKind::ALL;

/// A limit spec.
pub fn spec(algorithm: AlgorithmKind, rate: Rate, burst: u64, nodelay: bool) -> LimitSpec {
    LimitSpec {
        algorithm,
        rate,
        burst,
        nodelay,
    }
}

/// Any limit spec: every algorithm, rates whose intervals are and are not
/// whole nanoseconds, small bursts, with and without `nodelay`.
pub fn any_spec() -> impl proptest::strategy::Strategy<Value = LimitSpec> {
    use proptest::prelude::*;
    (
        prop::sample::select(KINDS.to_vec()),
        1u64..200,
        prop::sample::select(vec![SEC, 60 * SEC, 1_000_000, 250_000_000, 3 * SEC]),
        1u64..30,
        any::<bool>(),
    )
        .prop_map(|(algorithm, amount, period, burst, nodelay)| {
            let rate = Rate::new(amount, period).expect("a positive rate");
            spec(algorithm, rate, burst, nodelay)
        })
}

/// Limits, and whether they take the lock-free (atomic GCRA) path: GCRA and
/// its equivalents (the token bucket, the leaky bucket with `nodelay`) with
/// a whole-nanosecond emission interval, and nothing else.
pub fn lock_free_cases() -> [(LimitSpec, bool); 7] {
    [
        (
            spec(AlgorithmKind::Gcra, Rate::per_second(10), 20, false),
            true,
        ),
        (
            spec(AlgorithmKind::TokenBucket, Rate::per_minute(100), 5, false),
            true,
        ),
        (
            spec(AlgorithmKind::LeakyBucket, Rate::per_second(4), 5, true),
            true,
        ),
        (
            spec(AlgorithmKind::LeakyBucket, Rate::per_second(4), 5, false),
            false,
        ),
        // 1/3 s is not a whole number of nanoseconds.
        (
            spec(AlgorithmKind::Gcra, Rate::per_second(3), 5, false),
            false,
        ),
        (
            spec(AlgorithmKind::SlidingLog, Rate::per_second(10), 5, false),
            false,
        ),
        (
            spec(AlgorithmKind::FixedWindow, Rate::per_second(10), 5, false),
            false,
        ),
    ]
}

/// The algorithm the store decides a limit of `spec` by: on the atomic
/// table (`lock_free`), GCRA itself of the same rate and burst, which the
/// token bucket and the leaky bucket with `nodelay` take for
/// whole-nanosecond intervals. They decide as GCRA does while time goes
/// forward; at a reading earlier than their state's they stand still,
/// where GCRA decides at the reading (stricter). Elsewhere, the spec's own.
pub fn decided_as(spec: LimitSpec, lock_free: bool) -> Limiter {
    if lock_free {
        Limiter::Gcra(sluice_core::Gcra::new(spec.rate, spec.burst).unwrap())
    } else {
        spec.build().unwrap()
    }
}

/// Shards per limit in these tests (a power of two, so the mask is exact).
pub const SHARDS: usize = 4;

pub fn limiter(algorithm: AlgorithmKind, rate: Rate, burst: u64) -> Limiter {
    LimitSpec {
        algorithm,
        rate,
        burst,
        nodelay: false,
    }
    .build()
    .unwrap()
}

/// A store of [`SHARDS`] shards per limit on a manual clock that starts at a
/// whole number of seconds (so windows of whole milliseconds start there).
pub fn store(max_keys: usize) -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(100_000 * SEC);
    let cfg = MemoryStoreConfig {
        max_keys,
        shards: SHARDS,
    };
    (MemoryStore::with_clock(cfg, clock.clone()), clock)
}

/// The shard a key lands in under a store built by [`store`].
pub fn shard(key: KeyId) -> usize {
    key.shard(SHARDS - 1)
}

/// The first key named `{tag}{i}` that lands in `shard`.
pub fn key_in_shard(h: &KeyHasher, tag: &str, shard_index: usize) -> KeyId {
    (0..)
        .map(|i| h.key_id(&format!("{tag}{i}")))
        .find(|k| shard(*k) == shard_index)
        .unwrap()
}

/// What a limit would still admit for `key` now (a peek: changes nothing).
pub fn remaining<C: sluice_core::Clock>(store: &MemoryStore<C>, limit: &Limit, key: KeyId) -> u64 {
    store
        .check_one(&Check {
            limit,
            key,
            cost: 0,
        })
        .unwrap()
        .remaining
}

/// The cost-1 checks of one request: `(limit index, key)` pairs.
pub fn checks<'a>(limits: &'a [&'a Limit], pattern: &[(usize, KeyId)]) -> Vec<Check<'a>> {
    pattern
        .iter()
        .map(|&(l, key)| Check {
            limit: limits[l],
            key,
            cost: 1,
        })
        .collect()
}

/// Checks, on a frozen clock and with every cost 1, that a run of requests
/// was all-or-nothing and never refused within quota.
///
/// `patterns[i]` lists the `(limit index, key)` pairs of request pattern `i`
/// (no pair twice), and `admitted[i]` / `refused[i]` count how many requests
/// of that pattern were admitted / refused. Then, for every pair:
/// `burst - remaining` is exactly the number of admitted requests that
/// include it (a refused request charged nothing anywhere, an admitted one
/// charged every limit it met once); and every refused pattern has a pair
/// that is exhausted (with a frozen clock nothing replenishes, so a pair
/// short when the request was refused is still short now).
pub fn assert_all_or_nothing<C: sluice_core::Clock>(
    store: &MemoryStore<C>,
    limits: &[&Limit],
    patterns: &[Vec<(usize, KeyId)>],
    admitted: &[u64],
    refused: &[u64],
) {
    let mut pairs: Vec<(usize, KeyId)> = patterns.iter().flatten().copied().collect();
    pairs.sort();
    pairs.dedup();
    for &(l, key) in &pairs {
        let charged: u64 = patterns
            .iter()
            .zip(admitted)
            .filter(|(p, _)| p.contains(&(l, key)))
            .map(|(_, n)| n)
            .sum();
        let burst = limits[l].limiter().capacity();
        let left = remaining(store, limits[l], key);
        assert_eq!(
            burst - left,
            charged,
            "limit {} ({:?}) was charged {} for {charged} admitted requests",
            limits[l].id(),
            limits[l].limiter(),
            burst - left,
        );
    }
    for (p, &n) in patterns.iter().zip(refused) {
        if n > 0 {
            assert!(
                p.iter()
                    .any(|&(l, key)| remaining(store, limits[l], key) == 0),
                "{n} requests of {p:?} were refused with quota left on every limit"
            );
        }
    }
}
