//! The in-memory store: sharded, bounded, all-or-nothing.
//!
//! Keys are spread over many shards, each a small hash map behind its own
//! mutex, so a check locks one shard for a few nanoseconds and never a global
//! lock. A request that meets several limits locks the shards it needs in
//! ascending order (no deadlock), decides every limit, and commits all of them
//! only if all allow it: a refused request consumes nothing anywhere.
//!
//! Memory is bounded two ways. A key whose state has fully replenished is
//! worth nothing and is dropped (lazily when its shard fills, and by
//! [`MemoryStore::purge_expired`]). And each shard holds at most its share of
//! [`MemoryStoreConfig::max_keys`]; when a full shard must take a new key, it
//! evicts the eighth of its keys that are closest to full replenishment.
//! Eviction therefore errs towards *admitting*: an evicted key comes back
//! with a full quota. That is deliberate: the alternative (refusing new keys
//! when full) would let an attacker who sprays random keys lock out every new
//! legitimate client, while evicting the nearly-replenished keys forgives at
//! most a small remainder of their quota.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use parking_lot::{Mutex, MutexGuard};
use sluice_core::{CheckError, Clock, Decision, Limiter, Nanos, State, SystemClock};

use crate::key::KeyId;

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// The most keys (key × limit pairs) held at once.
    pub max_keys: usize,
    /// The number of shards, rounded up to a power of two; 0 picks one from
    /// the number of CPUs.
    pub shards: usize,
}

impl Default for MemoryStoreConfig {
    fn default() -> Self {
        Self {
            max_keys: 1_000_000,
            shards: 0,
        }
    }
}

/// One limit to check for one request.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit's algorithm and parameters.
    pub limiter: &'a Limiter,
    /// Whose state: the keyed hash of the limit and the client key.
    pub key: KeyId,
    /// The request's cost under this limit.
    pub cost: u64,
}

/// The result of checking one request against all its limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Whether every limit allowed the request (and it was committed).
    pub allowed: bool,
    /// One decision per [`Check`], in order. When the request is refused, the
    /// limits that would have allowed it report their unchanged state.
    pub decisions: Vec<Decision>,
}

/// The embedded, in-process store. See the module docs.
pub struct MemoryStore<C: Clock = SystemClock> {
    shards: Box<[Shard]>,
    mask: usize,
    per_shard_cap: usize,
    clock: C,
}

impl<C: Clock> std::fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &self.shards.len())
            .field("per_shard_cap", &self.per_shard_cap)
            .finish_non_exhaustive()
    }
}

#[repr(align(128))]
struct Shard(Mutex<ShardMap>);

#[derive(Default)]
struct ShardMap {
    map: HashMap<u128, Entry, BuildHasherDefault<IdHasher>>,
    /// The latest time this shard has seen: time never runs backwards here.
    high: Nanos,
}

struct Entry {
    state: State,
    idle_at: Nanos,
}

/// Key ids are already uniformly random: hash them by taking their low bits.
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*b);
        }
    }
    fn write_u128(&mut self, i: u128) {
        self.0 = i as u64;
    }
}

impl MemoryStore<SystemClock> {
    /// A store on the system clock.
    pub fn new(config: MemoryStoreConfig) -> Self {
        Self::with_clock(config, SystemClock::new())
    }
}

impl<C: Clock> MemoryStore<C> {
    /// A store on the given clock (a `ManualClock` in tests and simulations).
    pub fn with_clock(config: MemoryStoreConfig, clock: C) -> Self {
        let cpus = std::thread::available_parallelism().map_or(4, |n| n.get());
        let wanted = if config.shards == 0 {
            (cpus * 64).max(64)
        } else {
            config.shards
        };
        let n = wanted.next_power_of_two();
        let per_shard_cap = config.max_keys.div_ceil(n).max(1);
        let shards = (0..n)
            .map(|_| Shard(Mutex::new(ShardMap::default())))
            .collect();
        Self {
            shards,
            mask: n - 1,
            per_shard_cap,
            clock,
        }
    }

    /// The store's current time.
    pub fn now(&self) -> Nanos {
        self.clock.now()
    }

    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    #[inline]
    fn shard_of(&self, key: KeyId) -> usize {
        ((key.0 >> 64) as usize) & self.mask
    }

    /// Checks one request against all its limits, all-or-nothing.
    ///
    /// An impossible cost under any limit is an error and changes nothing.
    pub fn check(&self, checks: &[Check<'_>]) -> Result<Checked, CheckError> {
        match checks {
            [] => Ok(Checked {
                allowed: true,
                decisions: Vec::new(),
            }),
            [one] => {
                let decision = self.check_one(one)?;
                Ok(Checked {
                    allowed: decision.allowed,
                    decisions: vec![decision],
                })
            }
            many => self.check_many(many),
        }
    }

    /// Checks a single limit; the fast path.
    #[inline]
    pub fn check_one(&self, check: &Check<'_>) -> Result<Decision, CheckError> {
        let mut shard = self.shards[self.shard_of(check.key)].0.lock();
        let now = self.clock.now().max(shard.high);
        shard.high = now;
        let outcome = match shard.map.get(&check.key.0) {
            Some(entry) => check.limiter.check(&entry.state, now, check.cost)?,
            None => check.limiter.check(&State::Fresh, now, check.cost)?,
        };
        if let Some(update) = outcome.update {
            let cap = self.per_shard_cap;
            shard.commit(check.limiter, check.key, update, now, cap);
        }
        Ok(outcome.decision)
    }

    fn check_many(&self, checks: &[Check<'_>]) -> Result<Checked, CheckError> {
        let mut order: Vec<usize> = checks.iter().map(|c| self.shard_of(c.key)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: Vec<MutexGuard<'_, ShardMap>> =
            order.iter().map(|i| self.shards[*i].0.lock()).collect();
        let high = guards.iter().map(|g| g.high).max().unwrap_or(0);
        let now = self.clock.now().max(high);
        for g in &mut guards {
            g.high = now;
        }
        let guard_of = |key: KeyId| order.binary_search(&self.shard_of(key)).unwrap_or(0);

        let mut outcomes = Vec::with_capacity(checks.len());
        for c in checks {
            let g = &guards[guard_of(c.key)];
            let state = g.map.get(&c.key.0).map_or(&State::Fresh, |e| &e.state);
            outcomes.push(c.limiter.check(state, now, c.cost)?);
        }
        let allowed = outcomes.iter().all(|o| o.decision.allowed);
        let mut decisions = Vec::with_capacity(checks.len());
        for (c, o) in checks.iter().zip(outcomes) {
            let g = &mut guards[guard_of(c.key)];
            if allowed {
                if let Some(update) = o.update {
                    g.commit(c.limiter, c.key, update, now, self.per_shard_cap);
                }
                decisions.push(o.decision);
            } else if o.decision.allowed {
                // Not committed: report the limit as it stands.
                let state = g.map.get(&c.key.0).map_or(&State::Fresh, |e| &e.state);
                decisions.push(c.limiter.check(state, now, 0)?.decision);
            } else {
                decisions.push(o.decision);
            }
        }
        Ok(Checked { allowed, decisions })
    }

    /// Drops every key that has fully replenished. Returns how many.
    pub fn purge_expired(&self) -> usize {
        let now = self.clock.now();
        self.shards
            .iter()
            .map(|s| {
                let mut g = s.0.lock();
                let before = g.map.len();
                let now = now.max(g.high);
                g.map.retain(|_, e| e.idle_at > now);
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

    /// The most keys the store holds at once.
    pub fn capacity(&self) -> usize {
        self.per_shard_cap * self.shards.len()
    }
}

impl ShardMap {
    #[inline]
    fn commit(
        &mut self,
        limiter: &Limiter,
        key: KeyId,
        update: sluice_core::Update,
        now: Nanos,
        cap: usize,
    ) {
        if let Some(entry) = self.map.get_mut(&key.0) {
            limiter.apply(&mut entry.state, update);
            entry.idle_at = limiter.idle_at(&entry.state);
            return;
        }
        if self.map.len() >= cap {
            self.make_room(now, cap);
        }
        let mut state = State::Fresh;
        limiter.apply(&mut state, update);
        let idle_at = limiter.idle_at(&state);
        self.map.insert(key.0, Entry { state, idle_at });
    }

    /// Frees room in a full shard: forget replenished keys, then evict the
    /// eighth closest to replenishment.
    #[cold]
    fn make_room(&mut self, now: Nanos, cap: usize) {
        self.map.retain(|_, e| e.idle_at > now);
        if self.map.len() < cap {
            return;
        }
        let mut idle: Vec<Nanos> = self.map.values().map(|e| e.idle_at).collect();
        let k = (idle.len() / 8).max(1) - 1;
        let (_, threshold, _) = idle.select_nth_unstable(k);
        let threshold = *threshold;
        let mut to_evict = k + 1;
        self.map.retain(|_, e| {
            if to_evict > 0 && e.idle_at <= threshold {
                to_evict -= 1;
                false
            } else {
                true
            }
        });
    }
}
