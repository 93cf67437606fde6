//! Memory per tracked key, Sluice beside governor, counted by a global
//! allocator that tracks live bytes.
//!
//! `cargo run --release -p sluice-bench --bin memory_per_key [KEYS]`

#![allow(unsafe_code)] // a counting global allocator; nothing else

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_store::{Check, KeyHasher, KeyedLimiter, MemoryStore, MemoryStoreConfig};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: delegates to the system allocator and only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn main() {
    let keys: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);

    let before = live();
    let store = MemoryStore::new(MemoryStoreConfig {
        max_keys: keys as usize * 2,
        shards: 0,
    });
    let Ok(limiter) = (LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(10),
        burst: 20,
        nodelay: true,
    })
    .build() else {
        return;
    };
    let limit = store.limit("memory", limiter);
    let hasher = KeyHasher::random();
    for k in 0..keys {
        let key = hasher.key_id_bytes(&k.to_le_bytes());
        let _ = store.check_one(&Check {
            limit: &limit,
            key,
            cost: 1,
        });
    }
    let sluice = (live() - before) as f64 / keys as f64;
    drop(limit);
    drop(store);

    let before = live();
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(10),
        burst: 20,
        nodelay: true,
    };
    let Ok(keyed) = KeyedLimiter::<u64>::new(&spec, keys as usize * 2) else {
        return;
    };
    for k in 0..keys {
        let _ = keyed.check(&k, 1);
    }
    let keyed_bytes = (live() - before) as f64 / keys as f64;
    drop(keyed);

    let before = live();
    let (Some(ten), Some(twenty)) = (NonZeroU32::new(10), NonZeroU32::new(20)) else {
        return;
    };
    let gov = governor::RateLimiter::keyed(governor::Quota::per_second(ten).allow_burst(twenty));
    for k in 0..keys {
        let _ = gov.check_key(&k);
    }
    let governor = (live() - before) as f64 / keys as f64;

    println!("keys: {keys}");
    println!("sluice (GCRA, memory store, 8-byte key hash): {sluice:.1} bytes/key");
    println!("sluice (GCRA, KeyedLimiter<u64>, the 8-byte key kept): {keyed_bytes:.1} bytes/key");
    println!("governor 0.10 keyed (u64 keys): {governor:.1} bytes/key");
    println!("ratio memory store/governor: {:.2}", sluice / governor);
    println!("ratio KeyedLimiter/governor: {:.2}", keyed_bytes / governor);
}
