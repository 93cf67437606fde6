//! The store's fast path does not allocate: a check of a key the store
//! already holds costs no heap traffic, allowed or refused, under every
//! algorithm. Nor does the multi-limit path, up to four limits, nor a check
//! through the store seam (what the engine calls), with or without
//! reserves.
//!
//! A counting global allocator counts the allocations made by the current
//! thread while a measurement is on, so other tests running in parallel do
//! not disturb it.

// The allocator below must implement the `unsafe` trait `GlobalAlloc`.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sluice_core::{AlgorithmKind, LimitSpec, Limiter, ManualClock, Rate};
use sluice_store::{Check, KeyHasher, KeyedLimiter, MemoryStore, MemoryStoreConfig};

/// The system allocator, counting this thread's allocations while a
/// measurement is on.
struct Counting;

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

fn count_one() {
    // `try_with`: the thread-locals may be gone while a thread exits. They
    // are const-initialised and need no destructor, so touching them never
    // allocates (which would recurse into the allocator).
    let _ = MEASURING.try_with(|on| {
        if on.get() {
            let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        }
    });
}

// SAFETY: every method forwards its arguments unchanged to `System`, which
// upholds `GlobalAlloc`'s contract; the counting beside it only reads and
// writes two `Cell`s of this thread and never allocates or unwinds.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: our caller upholds `alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count_one();
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        // SAFETY: `ptr` and `layout` came from this allocator, i.e. from
        // `System`, as our caller guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as for `realloc`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the allocations it made on this
/// thread.
fn allocations<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALLOCATIONS.with(|n| n.set(0));
    MEASURING.with(|on| on.set(true));
    let r = f();
    MEASURING.with(|on| on.set(false));
    (r, ALLOCATIONS.with(Cell::get))
}

const SEC: u64 = 1_000_000_000;

/// 10 per second with a burst of 5, checked every 30 ms: about a third of
/// the requests pass, and windows of half a second turn over every 17 checks.
const RATE: Rate = Rate::per_second(10);
const BURST: u64 = 5;
const STEP: u64 = 30_000_000;

const KINDS: [AlgorithmKind; 6] = AlgorithmKind::ALL;

fn limiter(algorithm: AlgorithmKind) -> Limiter {
    LimitSpec {
        algorithm,
        rate: RATE,
        burst: BURST,
        nodelay: false,
    }
    .build()
    .unwrap()
}

fn store() -> (MemoryStore<ManualClock>, ManualClock) {
    let clock = ManualClock::new(100_000 * SEC);
    let cfg = MemoryStoreConfig {
        max_keys: 1_000,
        shards: 4,
    };
    (MemoryStore::with_clock(cfg, clock.clone()), clock)
}

/// Checks `n` times, `STEP` apart. Returns `(allowed, refused)`.
fn run(n: u64, clock: &ManualClock, mut check: impl FnMut() -> bool) -> (u64, u64) {
    let mut allowed = 0;
    for _ in 0..n {
        allowed += u64::from(check());
        clock.advance(STEP);
    }
    (allowed, n - allowed)
}

#[test]
fn checking_a_known_key_never_allocates() {
    for kind in KINDS {
        let (store, clock) = store();
        let limit = store.limit("l", limiter(kind));
        let key = KeyHasher::from_secret(b"t").key_id("k");
        let check = Check {
            limit: &limit,
            key,
            cost: 1,
        };
        let one = || store.check_one(&check).unwrap().allowed;
        // The first check inserts the key into an empty shard: that does
        // allocate, which shows that the counting works.
        let (_, n) = allocations(one);
        assert!(n > 0, "{kind:?}: inserting a key did not allocate?");
        // Warm up: 30 s of the same traffic
        // (60 windows) lets the sliding log's queue reach the size it keeps,
        // at most `BURST` entries.
        run(1_000, &clock, one);
        let ((allowed, refused), n) = allocations(|| run(10_000, &clock, one));
        assert!(
            allowed > 1_000 && refused > 1_000,
            "{kind:?}: {allowed} / {refused}"
        );
        assert_eq!(n, 0, "{kind:?}: {n} allocations in 10 000 checks");
    }
}

#[test]
fn checking_a_known_key_of_a_keyed_limiter_never_allocates() {
    for kind in KINDS {
        let clock = ManualClock::new(100_000 * SEC);
        let spec = LimitSpec {
            algorithm: kind,
            rate: RATE,
            burst: BURST,
            nodelay: false,
        };
        let keyed: KeyedLimiter<String, _> =
            KeyedLimiter::with_shards(&spec, 1_000, 4, clock.clone()).unwrap();
        // Looked up by `&str`: a known key is never copied.
        let one = || keyed.check("client-42", 1).unwrap().allowed;
        let (_, n) = allocations(one);
        assert!(n > 0, "{kind:?}: inserting a key did not allocate?");
        run(1_000, &clock, one);
        let ((allowed, refused), n) = allocations(|| run(10_000, &clock, one));
        assert!(
            allowed > 1_000 && refused > 1_000,
            "{kind:?}: {allowed} / {refused}"
        );
        assert_eq!(n, 0, "{kind:?}: {n} allocations in 10 000 checks");
    }
}

#[test]
fn the_multi_limit_path_allocates_nothing() {
    // `check_many` keeps its lock order, guards, outcomes and the decisions
    // it returns on the stack for up to four limits: nothing is allocated.
    // A single check likewise.
    let key = KeyHasher::from_secret(b"t").key_id("k");
    for (i, kind) in KINDS.into_iter().enumerate() {
        let (store, clock) = store();
        let a = store.limit("a", limiter(kind));
        let b = store.limit("b", limiter(KINDS[(i + 1) % KINDS.len()]));
        let both = [
            Check {
                limit: &a,
                key,
                cost: 1,
            },
            Check {
                limit: &b,
                key,
                cost: 1,
            },
        ];
        run(1_000, &clock, || store.check(&both).unwrap().allowed);
        let mut most = 0;
        let (allowed, refused) = run(1_000, &clock, || {
            let (r, n) = allocations(|| store.check(&both).unwrap());
            most = most.max(n);
            r.allowed
        });
        assert!(
            allowed > 100 && refused > 100,
            "{kind:?}: {allowed} / {refused}"
        );
        assert_eq!(
            most, 0,
            "{kind:?}: {most} allocations in one check of two limits"
        );

        let one = [both[0]];
        let mut most = 0;
        run(1_000, &clock, || {
            let (r, n) = allocations(|| store.check(&one).unwrap());
            most = most.max(n);
            r.allowed
        });
        assert_eq!(
            most, 0,
            "{kind:?}: {most} allocations in one check of one limit"
        );
    }
}

#[test]
fn a_check_through_the_seam_allocates_nothing() {
    use sluice_store::seam::{Check as SeamCheck, CounterDef, Store, now_or_never};
    let key = KeyHasher::from_secret(b"t").key_id("k");
    for (i, kind) in KINDS.into_iter().enumerate() {
        let (store, clock) = store();
        let spec = |kind| LimitSpec {
            algorithm: kind,
            rate: RATE,
            burst: BURST,
            nodelay: false,
        };
        let a = store.counter(CounterDef::new("a", spec(kind)).unwrap());
        let b = store.counter(CounterDef::new("b", spec(KINDS[(i + 1) % KINDS.len()])).unwrap());
        let check = |counter, reserve| SeamCheck {
            counter,
            key,
            cost: 1,
            reserve,
            lease: None,
        };
        for group in [
            vec![check(&a, 0)],
            vec![check(&a, 0), check(&b, 0)],
            vec![check(&a, 2), check(&b, 0)],
        ] {
            let decide = || {
                now_or_never(Store::check(&store, &group))
                    .unwrap()
                    .unwrap()
                    .allowed
            };
            run(1_000, &clock, decide);
            let mut most = 0;
            let (allowed, refused) = run(1_000, &clock, || {
                let (r, n) = allocations(decide);
                most = most.max(n);
                r
            });
            assert!(
                allowed > 100 && refused > 100,
                "{kind:?}, {} checks: {allowed} / {refused}",
                group.len()
            );
            assert_eq!(
                most,
                0,
                "{kind:?}: {most} allocations in one check of {} limits",
                group.len()
            );
        }
    }
}
