//! The over-limit cache: a request known to be over its limit is refused
//! locally until its retry time, so a flood from one abusive key does not
//! reach Redis.
//!
//! When the store refuses a request (a set of limit, key and cost triples)
//! with `retry_after = r`, the same request cannot pass before `now + r`:
//! other instances only add to the used quota in the meantime. So the cache
//! answers an identical request itself until then, with the store's
//! decisions aged by the time that has passed (`reset_after` and
//! `retry_after` count down; `remaining` stays what the store last said,
//! which can only be an underestimate). Any other request — another cost,
//! another set of limits — goes to the store.
//!
//! A refund ([`forget`](OverLimitCache::forget)) gives quota back, so a
//! refusal cached before it may no longer hold: every refunded (limit,
//! key) moves its *stripe* (one of [`STRIPES`], by a hash of the pair) to a
//! new generation, and an entry is answered only while every part's stripe
//! is at the generation it had before the store was asked. A refund
//! therefore forgets the entries of its own keys, and of about
//! `1/STRIPES` of the others.
//!
//! A refund made by another instance is not seen here: a cached refusal
//! then lasts until its retry time (it errs towards refusing). A refusal
//! that counts on a concurrency slot is never cached, since a slot comes
//! back whenever its holder releases it, not at a time the store can name.
//!
//! The cache is bounded: each shard holds at most `capacity / shards`
//! entries and drops expired ones before taking a new one; when it is full
//! of live entries, the new refusal is simply not cached.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use sluice_core::{Decision, Nanos};
use sluice_store::KeyId;
use smallvec::SmallVec;

const SHARDS: usize = 16;

/// How many generation counters refunds are spread over: a refund forgets
/// about 1/4,096 of the other keys' refusals, so steady refunds (one after
/// every response) still leave the cache most of its entries.
pub const STRIPES: usize = 4096;

/// The generations of a request's parts' stripes, read before the store is
/// asked (see the module docs).
pub type Stamp = SmallVec<[u64; 4]>;

/// One limit of a request, as the cache identifies it: the limit's tag, the
/// client key id, the cost and the reserve (the cost that must be left
/// after the charge: a request refused for its reserve, say a capped
/// priority class, says nothing about one with a smaller reserve).
pub type Part = (u64, KeyId, u64, u64);

#[derive(Debug, Clone)]
struct Entry {
    parts: SmallVec<[Part; 2]>,
    /// The generation of each part's stripe before the store was asked.
    stamp: Stamp,
    /// The decisions, with `reset_after`/`retry_after` as absolute times.
    decisions: SmallVec<[Decision; 2]>,
    /// When the request could pass, in nanoseconds since the epoch.
    retry_at: Nanos,
}

/// A bounded cache of refused requests. See the module docs.
#[derive(Debug)]
pub struct OverLimitCache {
    shards: Box<[Mutex<HashMap<u64, Entry>>]>,
    per_shard: usize,
    epoch: Instant,
    hasher: std::collections::hash_map::RandomState,
    /// Generations, moved by refunds.
    stripes: Box<[AtomicU64]>,
}

impl OverLimitCache {
    /// A cache of at most `capacity` refused requests.
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            per_shard: capacity.div_ceil(SHARDS).max(1),
            epoch: Instant::now(),
            hasher: std::collections::hash_map::RandomState::new(),
            stripes: (0..STRIPES).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The stripe of a (limit tag, key id) pair. Key ids are keyed hashes
    /// already: their low bits, mixed with the tag, spread evenly.
    fn stripe(&self, tag: u64, key: KeyId) -> &AtomicU64 {
        let mixed = (key.low() ^ tag.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The top 12 bits: one of 4,096.
        &self.stripes[(mixed >> 52) as usize % STRIPES]
    }

    /// The generations of `parts`' stripes now: read before asking the
    /// store, and given to [`remember`](Self::remember) with its answer.
    pub fn stamp(&self, parts: &[Part]) -> Stamp {
        parts
            .iter()
            .map(|(tag, key, ..)| self.stripe(*tag, *key).load(Ordering::Acquire))
            .collect()
    }

    /// Forgets every refusal that counted on (`tag`, `key`): called once a
    /// refund to it is made.
    pub fn forget(&self, tag: u64, key: KeyId) {
        self.stripe(tag, key).fetch_add(1, Ordering::AcqRel);
    }

    fn now(&self) -> Nanos {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn locate(&self, parts: &[Part]) -> (usize, u64) {
        let mut h = self.hasher.build_hasher();
        for (tag, key, cost, reserve) in parts {
            h.write_u64(*tag);
            h.write_u128(key.0);
            h.write_u64(*cost);
            h.write_u64(*reserve);
        }
        let h = h.finish();
        ((h >> 60) as usize % SHARDS, h)
    }

    /// The cached refusal of this exact request, if still in force: one
    /// decision per part, in order.
    pub fn lookup(&self, parts: &[Part]) -> Option<Vec<Decision>> {
        let (shard, h) = self.locate(parts);
        let now = self.now();
        let map = self.shards[shard].lock();
        let e = map.get(&h)?;
        let same_generations = || {
            e.stamp
                .iter()
                .zip(parts)
                .all(|(g, (tag, key, ..))| *g == self.stripe(*tag, *key).load(Ordering::Acquire))
        };
        if now >= e.retry_at || e.parts.as_slice() != parts || !same_generations() {
            return None;
        }
        Some(
            e.decisions
                .iter()
                .map(|d| Decision {
                    reset_after: d.reset_after.saturating_sub(now),
                    retry_after: d.retry_after.map(|r| r.saturating_sub(now).max(1)),
                    ..*d
                })
                .collect(),
        )
    }

    /// Remembers the store's refusal of a request.
    pub fn remember(&self, parts: &[Part], stamp: Stamp, decisions: &[Decision]) {
        let Some(retry) = decisions
            .iter()
            .filter(|d| !d.allowed)
            .filter_map(|d| d.retry_after)
            .max()
            .filter(|r| *r > 0)
        else {
            return;
        };
        let now = self.now();
        let entry = Entry {
            parts: parts.iter().copied().collect(),
            stamp,
            decisions: decisions
                .iter()
                .map(|d| Decision {
                    reset_after: now.saturating_add(d.reset_after),
                    retry_after: d.retry_after.map(|r| now.saturating_add(r)),
                    ..*d
                })
                .collect(),
            retry_at: now.saturating_add(retry),
        };
        let (shard, h) = self.locate(parts);
        let mut map = self.shards[shard].lock();
        if map.len() >= self.per_shard && !map.contains_key(&h) {
            map.retain(|_, e| e.retry_at > now);
            if map.len() >= self.per_shard {
                return;
            }
        }
        map.insert(h, entry);
    }

    /// How many refusals are cached (live or expired).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn refusal(retry_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 10,
            remaining: 0,
            reset_after: retry_ms * 2_000_000,
            retry_after: Some(retry_ms * 1_000_000),
            delay: 0,
        }
    }

    #[test]
    fn a_refund_forgets_the_refusals_of_its_key() {
        let c = OverLimitCache::new(100);
        let parts = [(1, KeyId(7), 1, 0)];
        let stale = c.stamp(&parts);
        c.forget(1, KeyId(7));
        // Asked before the refund, answered after: not kept.
        c.remember(&parts, stale, &[refusal(10_000)]);
        assert!(
            c.lookup(&parts).is_none(),
            "a refusal from before the refund"
        );
        c.remember(&parts, c.stamp(&parts), &[refusal(10_000)]);
        assert!(c.lookup(&parts).is_some());
        c.forget(1, KeyId(7));
        assert!(c.lookup(&parts).is_none(), "the refund forgets it");
    }

    #[test]
    fn a_refund_keeps_nearly_every_other_key_s_refusal() {
        let c = OverLimitCache::new(10_000);
        let parts = |k: u128| {
            [(
                1,
                KeyId(k.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835)),
                1,
                0,
            )]
        };
        for k in 0..1_000 {
            c.remember(&parts(k), c.stamp(&parts(k)), &[refusal(60_000)]);
        }
        c.forget(1, parts(0)[0].1);
        assert!(c.lookup(&parts(0)).is_none());
        let kept = (1..1_000)
            .filter(|k| c.lookup(&parts(*k)).is_some())
            .count();
        assert!(kept >= 990, "{kept} of 999 other refusals kept");
    }

    #[test]
    fn answers_the_same_request_until_retry() {
        let c = OverLimitCache::new(100);
        let parts = [(1, KeyId(7), 2, 0), (2, KeyId(9), 1, 0)];
        let ok = Decision::full(5);
        c.remember(&parts, c.stamp(&parts), &[refusal(10_000), ok]);
        let d = c.lookup(&parts).expect("cached");
        assert!(!d[0].allowed);
        assert!(
            d[0].retry_after
                .is_some_and(|r| r <= 10_000_000_000 && r > 0)
        );
        assert_eq!(d[1].remaining, 5);
        assert!(
            c.lookup(&[(1, KeyId(7), 1, 0), (2, KeyId(9), 1, 0)])
                .is_none()
        );
        assert!(c.lookup(&parts[..1]).is_none(), "another set of limits");
        assert!(
            c.lookup(&[(1, KeyId(8), 2, 0), (2, KeyId(9), 1, 0)])
                .is_none()
        );
        assert!(
            c.lookup(&[(1, KeyId(7), 2, 0), (2, KeyId(9), 1, 5)])
                .is_none(),
            "another reserve"
        );
    }

    #[test]
    fn keeps_no_allowed_request_and_expires_at_retry_time() {
        let c = OverLimitCache::new(100);
        let parts = [(1, KeyId(1), 1, 0)];
        c.remember(&parts, c.stamp(&parts), &[Decision::full(1)]);
        assert!(c.is_empty(), "an allowed request is not cached");
        c.remember(&parts, c.stamp(&parts), &[refusal(1)]);
        assert_eq!(c.len(), 1);
        std::thread::sleep(Duration::from_millis(3));
        assert!(c.lookup(&parts).is_none());
    }

    #[test]
    fn is_bounded() {
        let c = OverLimitCache::new(32);
        for i in 0..10_000u128 {
            let parts = [(1, KeyId(i << 64 | i), 1, 0)];
            c.remember(&parts, c.stamp(&parts), &[refusal(60_000)]);
        }
        assert!(c.len() <= 32, "{} entries", c.len());
    }
}
