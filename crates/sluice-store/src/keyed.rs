//! A limiter over many keys in one process, for callers that hold the key
//! itself: the keyed counterpart of [`DirectLimiter`](crate::DirectLimiter),
//! and of governor's keyed `RateLimiter`.
//!
//! [`MemoryStore`](crate::MemoryStore) is keyed by [`KeyId`](crate::KeyId),
//! a secret-keyed 128-bit hash that the caller computes, because its state
//! may be named outside the process (Redis) and must never reveal a key.
//! A `KeyedLimiter` keeps its state in this process only, so it keeps the
//! key itself and needs no collision-resistant hash:
//!
//! - a fast hash with a random per-limiter seed (`foldhash`) picks the shard
//!   and the bucket, and the key is then **compared with the stored key**,
//!   so two clients never share state, whatever their hashes;
//! - each entry is the key and its state; for GCRA (and for the token bucket
//!   and the leaky bucket with `nodelay`, which decide exactly as GCRA does)
//!   with a whole-nanosecond emission interval, the state is one `AtomicU64`
//!   (the theoretical arrival time), updated by compare-and-swap as in
//!   `DirectLimiter`. A check of a known key takes its shard's lock *shared*
//!   and never waits for another check; only inserting a new key or
//!   evicting takes it exclusively. The lock is striped by thread, so that
//!   two threads reading one shard do not pass its cache line back and
//!   forth. Other algorithms keep each key's state
//!   behind its own small mutex.
//!
//! Memory is bounded as in the memory store: at most `max_keys` keys; a full
//! shard first forgets replenished keys, then the eighth closest to
//! replenishment (erring towards admitting, as the store does). Raw keys stay
//! in process memory; nothing here logs or exports them.
//!
//! Time: as in `DirectLimiter`, the atomic path keeps no high-water mark. A
//! clock that steps back can only make GCRA stricter (the TAT is then further
//! ahead of "now"), never admit more; the system clock follows the monotonic
//! time-stamp counter and does not step back. The mutex path keeps the latest
//! time per key and never decides at an earlier one, as the memory store's
//! shards do.
//!
//! Where the time goes: a check of a known key is one hash, one shared lock,
//! one probe of the shard's table (the key compared), one clock read and one
//! compare-and-swap. Two details matter for speed. The shard index comes from
//! hash bits the table does not use (hashbrown takes the low bits for the
//! bucket and the top seven for its tag: sharing the tag's bits made every
//! probe compare several keys). And only the commit happens under the lock;
//! the rest of the [`Decision`] (a division) is computed after the unlock.

use std::borrow::Borrow;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use hashbrown::HashTable;
use parking_lot::Mutex;
use sluice_core::{
    CheckError, Clock, Decision, LimitError, LimitSpec, Limiter, Nanos, State, SystemClock,
};

use crate::atomic_gcra::AtomicGcra;
use crate::sync::striped::RwLock;

/// Many keys, one limit, in process. See the module docs.
///
/// ```
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_store::KeyedLimiter;
/// let spec = LimitSpec {
///     algorithm: AlgorithmKind::Gcra,
///     rate: Rate::per_second(10),
///     burst: 3,
///     nodelay: false,
/// };
/// let limiter: KeyedLimiter<String> = KeyedLimiter::new(&spec, 10_000).unwrap();
/// let admitted = (0..5).filter(|_| limiter.check("alice", 1).unwrap().allowed).count();
/// assert_eq!(admitted, 3);
/// assert!(limiter.check("bob", 1).unwrap().allowed);
/// assert_eq!(limiter.len(), 2);
/// ```
pub struct KeyedLimiter<K, C: Clock = SystemClock> {
    inner: Inner<K>,
    hasher: foldhash::fast::RandomState,
    /// `(hash >> 32) & mask` is the shard index: bits that the table within
    /// the shard uses for neither its bucket (the low bits) nor its tag (the
    /// top seven).
    mask: usize,
    per_shard_cap: usize,
    clock: C,
}

enum Inner<K> {
    /// GCRA with its TAT in nanoseconds, in one word per key.
    Atomic {
        gcra: AtomicGcra,
        shards: Box<[Shard<K, AtomicU64>]>,
    },
    /// Anything else: the state and the latest time it was decided at.
    Locked {
        limiter: Limiter,
        shards: Box<[Shard<K, Mutex<Timed>>]>,
    },
}

/// A key's state behind its mutex, with the latest time seen for it.
struct Timed {
    state: State,
    high: Nanos,
}

/// One shard: a hash table of entries behind a reader-writer lock, on its
/// own cache lines.
#[repr(align(128))]
struct Shard<K, V>(RwLock<HashTable<Entry<K, V>>>);

struct Entry<K, V> {
    key: K,
    state: V,
}

impl<K, C: Clock> std::fmt::Debug for KeyedLimiter<K, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyedLimiter")
            .field("lock_free", &self.is_lock_free())
            .field("shards", &self.shard_count())
            .field("per_shard_cap", &self.per_shard_cap)
            .finish_non_exhaustive()
    }
}

impl<K, C: Clock> KeyedLimiter<K, C> {
    /// Whether checks of known keys are lock-free (one compare-and-swap
    /// under a shared shard lock).
    pub fn is_lock_free(&self) -> bool {
        matches!(self.inner, Inner::Atomic { .. })
    }

    fn shard_count(&self) -> usize {
        match &self.inner {
            Inner::Atomic { shards, .. } => shards.len(),
            Inner::Locked { shards, .. } => shards.len(),
        }
    }
}

impl<K: Hash + Eq> KeyedLimiter<K, SystemClock> {
    /// A limiter on the system clock holding at most `max_keys` keys.
    pub fn new(spec: &LimitSpec, max_keys: usize) -> Result<Self, LimitError> {
        Self::with_clock(spec, max_keys, SystemClock::new())
    }
}

impl<K: Hash + Eq, C: Clock> KeyedLimiter<K, C> {
    /// A limiter on the given clock holding at most `max_keys` keys, with a
    /// number of shards picked from the CPUs.
    pub fn with_clock(spec: &LimitSpec, max_keys: usize, clock: C) -> Result<Self, LimitError> {
        let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
        Self::with_shards(spec, max_keys, (cpus * 32).max(64), clock)
    }

    /// As [`with_clock`](Self::with_clock), with `shards` shards (rounded up
    /// to a power of two).
    pub fn with_shards(
        spec: &LimitSpec,
        max_keys: usize,
        shards: usize,
        clock: C,
    ) -> Result<Self, LimitError> {
        let limiter = spec.build()?;
        // At most 2^16 shards: the index takes hash bits 32..48.
        let n = shards.clamp(1, 1 << 16).next_power_of_two();
        let inner = match AtomicGcra::for_spec(spec) {
            Some(gcra) => Inner::Atomic {
                gcra,
                shards: new_shards(n),
            },
            None => Inner::Locked {
                limiter,
                shards: new_shards(n),
            },
        };
        Ok(Self {
            inner,
            hasher: foldhash::fast::RandomState::default(),
            mask: n - 1,
            per_shard_cap: max_keys.div_ceil(n).max(1),
            clock,
        })
    }

    /// The limiter's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The most keys held at once.
    pub fn capacity(&self) -> usize {
        self.per_shard_cap * self.shard_count()
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Atomic { shards, .. } => shards.iter().map(|s| s.0.read().len()).sum(),
            Inner::Locked { shards, .. } => shards.iter().map(|s| s.0.read().len()).sum(),
        }
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[inline]
    fn shard_index(&self, hash: u64) -> usize {
        (hash >> 32) as usize & self.mask
    }

    /// Checks a request of `cost` for `key` now, committing it if admitted.
    ///
    /// `key` may be any borrowed form of `K` (`&str` for `String` keys); a
    /// new key is stored as its owned form.
    #[inline(always)]
    pub fn check<Q>(&self, key: &Q, cost: u64) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard_index(hash);
        match &self.inner {
            Inner::Atomic { gcra, shards } => {
                let shard = &shards[shard].0;
                // Only the commit happens under the lock; the decision's
                // arithmetic (a division) comes after the unlock, and costs
                // nothing to a caller that reads only `allowed`.
                let committed = {
                    let table = shard.read();
                    table
                        .find(hash, |e| e.key.borrow() == key)
                        // The clock is read once the entry is found: its
                        // latency then overlaps the lookup's.
                        .map(|e| gcra.commit(&e.state, self.clock.now(), cost))
                };
                match committed {
                    Some(r) => r.map(|r| gcra.decision(r)),
                    None => self.insert_atomic(gcra, shard, hash, key, self.clock.now(), cost),
                }
            }
            Inner::Locked { limiter, shards } => {
                self.check_locked(limiter, &shards[shard].0, hash, key, cost)
            }
        }
    }

    /// A check under any algorithm but GCRA's atomic path: out of line, so
    /// that the atomic path inlines into the caller.
    #[inline(never)]
    fn check_locked<Q>(
        &self,
        limiter: &Limiter,
        shard: &RwLock<HashTable<Entry<K, Mutex<Timed>>>>,
        hash: u64,
        key: &Q,
        cost: u64,
    ) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.clock.now();
        if let Some(e) = shard.read().find(hash, |e| e.key.borrow() == key) {
            return locked_check(limiter, &e.state, now, cost);
        }
        self.insert_locked(limiter, shard, hash, key, now, cost)
    }

    /// The slow path of a GCRA check: the key was not found.
    #[cold]
    fn insert_atomic<Q>(
        &self,
        gcra: &AtomicGcra,
        shard: &RwLock<HashTable<Entry<K, AtomicU64>>>,
        hash: u64,
        key: &Q,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut table = shard.write();
        if let Some(e) = table.find(hash, |e| e.key.borrow() == key) {
            return gcra.check(&e.state, now, cost);
        }
        let (decision, tat) = gcra.check_fresh(now, cost)?;
        if let Some(tat) = tat {
            self.insert_new(&mut table, hash, key, AtomicU64::new(tat), |e| {
                e.state.load(Ordering::Relaxed).saturating_sub(now)
            });
        }
        Ok(decision)
    }

    /// The slow path of a mutex check: the key was not found.
    #[cold]
    fn insert_locked<Q>(
        &self,
        limiter: &Limiter,
        shard: &RwLock<HashTable<Entry<K, Mutex<Timed>>>>,
        hash: u64,
        key: &Q,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, CheckError>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let mut table = shard.write();
        if let Some(e) = table.find(hash, |e| e.key.borrow() == key) {
            return locked_check(limiter, &e.state, now, cost);
        }
        let mut state = State::Fresh;
        let outcome = limiter.check(&state, now, cost)?;
        if let Some(update) = outcome.update {
            limiter.apply(&mut state, update);
            let state = Mutex::new(Timed { state, high: now });
            self.insert_new(&mut table, hash, key, state, |e| {
                let t = e.state.lock();
                limiter.idle_at(&t.state).saturating_sub(t.high.max(now))
            });
        }
        Ok(outcome.decision)
    }

    /// Stores a key not seen before in its write-locked shard, first making
    /// room if the shard is full (`idle_in`: the time until an entry is
    /// replenished).
    fn insert_new<Q, V>(
        &self,
        table: &mut HashTable<Entry<K, V>>,
        hash: u64,
        key: &Q,
        state: V,
        idle_in: impl FnMut(&Entry<K, V>) -> Nanos,
    ) where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        if table.len() >= self.per_shard_cap {
            make_room(table, self.per_shard_cap, idle_in);
        }
        let hasher = &self.hasher;
        table.insert_unique(
            hash,
            Entry {
                key: key.to_owned(),
                state,
            },
            |e| hasher.hash_one(&e.key),
        );
    }

    /// Forgets every fully replenished key. Returns how many.
    pub fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        match &self.inner {
            Inner::Atomic { shards, .. } => shards
                .iter()
                .map(|s| {
                    let mut t = s.0.write();
                    let before = t.len();
                    t.retain(|e| e.state.load(Ordering::Relaxed) > now);
                    before - t.len()
                })
                .sum(),
            Inner::Locked { limiter, shards } => shards
                .iter()
                .map(|s| {
                    let mut t = s.0.write();
                    let before = t.len();
                    t.retain(|e| {
                        let t = e.state.get_mut();
                        limiter.idle_at(&t.state) > now.max(t.high)
                    });
                    before - t.len()
                })
                .sum(),
        }
    }
}

fn new_shards<K, V>(n: usize) -> Box<[Shard<K, V>]> {
    (0..n)
        .map(|_| Shard(RwLock::new(HashTable::new())))
        .collect()
}

/// Any algorithm on a key's own mutex; time never runs backwards for a key.
#[inline]
fn locked_check(
    limiter: &Limiter,
    state: &Mutex<Timed>,
    now: Nanos,
    cost: u64,
) -> Result<Decision, CheckError> {
    let mut t = state.lock();
    t.high = t.high.max(now);
    let now = t.high;
    limiter.check_and_apply(&mut t.state, now, cost)
}

/// Frees room in a full shard: forget replenished keys (`idle_in` is the
/// time until a key is replenished), then the eighth closest to
/// replenishment.
#[cold]
fn make_room<K, V>(
    table: &mut HashTable<Entry<K, V>>,
    cap: usize,
    mut idle_in: impl FnMut(&Entry<K, V>) -> Nanos,
) {
    table.retain(|e| idle_in(&*e) > 0);
    if table.len() < cap {
        return;
    }
    let mut idle: Vec<Nanos> = table.iter().map(&mut idle_in).collect();
    let k = (idle.len() / 8).max(1) - 1;
    let (_, threshold, _) = idle.select_nth_unstable(k);
    let threshold = *threshold;
    let mut to_evict = k + 1;
    table.retain(|e| {
        if to_evict > 0 && idle_in(&*e) <= threshold {
            to_evict -= 1;
            false
        } else {
            true
        }
    });
}
