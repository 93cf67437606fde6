//! One limit's state: a sharded map from key to that algorithm's state.
//!
//! Each shard is a hash map behind its own mutex, padded to its own cache
//! lines. A map entry is the 8-byte key (the low half of a [`KeyId`]) and the
//! algorithm's state (16 bytes for all but the sliding log): no enum tag, no
//! stored deadline. Whether a key is replenished is computed from its state
//! when memory must be freed.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sluice_core::{Algorithm, CheckError, Debited, Decision, Nanos, Outcome};

use crate::key::KeyId;
use crate::sync::{Mutex, MutexGuard};

/// Key ids are already uniformly random: hash them by taking their bits.
#[derive(Default)]
pub(crate) struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = i;
    }
}

/// The keys of one shard.
pub(crate) struct ShardMap<S> {
    map: KeyMap<S>,
}

#[repr(align(128))]
struct Shard<S>(Mutex<ShardMap<S>>);

/// The state of one limit over all its keys.
pub struct Table<A: Algorithm> {
    alg: A,
    shards: Box<[Shard<A::State>]>,
    mask: usize,
    per_shard_cap: usize,
}

impl<A: Algorithm> std::fmt::Debug for Table<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("shards", &self.shards.len())
            .field("per_shard_cap", &self.per_shard_cap)
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> Table<A> {
    /// A table of `shards` shards (a power of two) holding at most
    /// `max_keys` keys.
    pub(crate) fn new(alg: A, shards: usize, max_keys: usize) -> Self {
        let n = shards.next_power_of_two();
        let shards = (0..n)
            .map(|_| {
                Shard(Mutex::new(ShardMap {
                    map: HashMap::default(),
                }))
            })
            .collect();
        Self {
            alg,
            shards,
            mask: n - 1,
            per_shard_cap: max_keys.div_ceil(n).max(1),
        }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &A {
        &self.alg
    }

    /// The shard index of a key.
    #[inline]
    pub(crate) fn shard_of(&self, key: KeyId) -> usize {
        key.shard(self.mask)
    }

    /// Locks one shard.
    #[inline]
    pub(crate) fn lock(&self, shard: usize) -> MutexGuard<'_, ShardMap<A::State>> {
        self.shards[shard].0.lock()
    }

    /// Checks one key and commits an admitted request: the fast path.
    #[inline]
    pub fn check(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        let mut g = self.lock(self.shard_of(key));
        match g.map.get_mut(&key.low()) {
            Some(state) => {
                let o = self.alg.check(state, now, cost)?;
                if let Some(u) = o.update {
                    self.alg.apply(state, u);
                }
                Ok(o.decision)
            }
            None => {
                let o = self.alg.check(&A::State::default(), now, cost)?;
                if let Some(u) = o.update {
                    g.insert(&self.alg, key.low(), u, now, self.per_shard_cap);
                }
                Ok(o.decision)
            }
        }
    }

    /// Forgets every fully replenished key. Returns how many.
    pub fn purge(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut g = s.0.lock();
                let before = g.map.len();
                g.map.retain(|_, s| self.alg.idle_at(s) > now);
                before - g.map.len()
            })
            .sum()
    }

    /// The number of keys held.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.lock().map.len()).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this table holds.
    pub fn capacity(&self) -> usize {
        self.per_shard_cap * self.shards.len()
    }

    /// The per-shard cap.
    pub(crate) fn per_shard_cap(&self) -> usize {
        self.per_shard_cap
    }
}

impl<S: Default> ShardMap<S> {
    /// Checks a key without committing.
    #[inline]
    pub(crate) fn peek<A: Algorithm<State = S>>(
        &self,
        alg: &A,
        key: KeyId,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<A::Update>, CheckError> {
        match self.map.get(&key.low()) {
            Some(s) => alg.check(s, now, cost),
            None => alg.check(&S::default(), now, cost),
        }
    }

    /// Gives back `amount` of a key's charged cost at `now` (see
    /// [`Algorithm::refund`]); a key not held here is full already.
    pub(crate) fn refund<A: Algorithm<State = S>>(
        &mut self,
        alg: &A,
        key: KeyId,
        now: Nanos,
        amount: u64,
    ) {
        if let Some(s) = self.map.get_mut(&key.low()) {
            alg.refund(s, now, amount);
        }
    }

    /// Charges `amount` to a key at `now`, into debt up to `max_debt` (see
    /// [`Algorithm::debit`]). A key not held is taken in when anything is
    /// charged, as a committed check takes it in (room made in a full
    /// shard).
    pub(crate) fn debit<A: Algorithm<State = S>>(
        &mut self,
        alg: &A,
        key: KeyId,
        (now, cap): (Nanos, usize),
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        if let Some(s) = self.map.get_mut(&key.low()) {
            return alg.debit(s, now, amount, max_debt);
        }
        let mut s = S::default();
        let debited = alg.debit(&mut s, now, amount, max_debt);
        if debited.charged > 0 {
            if self.map.len() >= cap {
                self.make_room(alg, now, cap);
            }
            self.map.insert(key.low(), s);
        }
        debited
    }

    /// Commits an update to a key.
    #[inline]
    pub(crate) fn commit<A: Algorithm<State = S>>(
        &mut self,
        alg: &A,
        key: KeyId,
        update: A::Update,
        now: Nanos,
        cap: usize,
    ) {
        match self.map.get_mut(&key.low()) {
            Some(s) => alg.apply(s, update),
            None => self.insert(alg, key.low(), update, now, cap),
        }
    }

    fn insert<A: Algorithm<State = S>>(
        &mut self,
        alg: &A,
        key: u64,
        update: A::Update,
        now: Nanos,
        cap: usize,
    ) {
        if self.map.len() >= cap {
            self.make_room(alg, now, cap);
        }
        let mut s = S::default();
        alg.apply(&mut s, update);
        self.map.insert(key, s);
    }

    /// Frees room in a full shard (see [`make_room`]).
    #[cold]
    fn make_room<A: Algorithm<State = S>>(&mut self, alg: &A, now: Nanos, cap: usize) {
        make_room(&mut self.map, now, cap, |s| alg.idle_at(s));
    }
}

/// A shard's keys, by the low half of their id.
pub(crate) type KeyMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Frees room in a full shard's map: forgets replenished keys (replenished
/// at `idle_at`, not after `now`), then evicts the eighth of keys closest
/// to replenishment (erring towards admitting: an evicted key comes back
/// full).
#[cold]
pub(crate) fn make_room<V>(
    map: &mut KeyMap<V>,
    now: Nanos,
    cap: usize,
    mut idle_at: impl FnMut(&mut V) -> Nanos,
) {
    map.retain(|_, v| idle_at(v) > now);
    if map.len() < cap {
        return;
    }
    let mut idle: Vec<Nanos> = map.values_mut().map(&mut idle_at).collect();
    let k = (idle.len() / 8).max(1) - 1;
    let (_, threshold, _) = idle.select_nth_unstable(k);
    let threshold = *threshold;
    let mut to_evict = k + 1;
    map.retain(|_, v| {
        if to_evict > 0 && idle_at(v) <= threshold {
            to_evict -= 1;
            false
        } else {
            true
        }
    });
}
