//! The most-limited keys: a bounded heavy-hitters sketch (Space-Saving).
//!
//! The sketch keeps `capacity` counters. A key already counted is
//! incremented; a new key takes a free counter, or else replaces the
//! smallest one and inherits its count (remembered as the new key's possible
//! overestimate, `error`). Any key limited more than `total / capacity`
//! times is guaranteed to be in the sketch, and each reported count exceeds
//! the true one by at most its `error`. Memory is fixed, whatever the
//! number of keys.
//!
//! Counts decay: every `half_life` they are halved, so the ranking follows
//! who is limited *now*, not who was last week.

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_store::KeyId;

/// One of the most-limited keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopKey {
    /// The key's keyed hash (never the key itself).
    pub key: KeyId,
    /// How often it was limited (decayed), an upper bound.
    pub count: u64,
    /// How much of `count` may belong to keys it displaced.
    pub error: u64,
}

impl TopKey {
    /// The label shown for the key: the first 16 hex digits of its hash.
    pub fn label(&self) -> String {
        let hex = self.key.to_hex();
        hex[..16.min(hex.len())].to_owned()
    }
}

#[derive(Debug)]
struct Sketch {
    counters: Vec<TopKey>,
    last_decay: Instant,
}

/// A bounded top-K of limited keys. See the module docs.
#[derive(Debug)]
pub struct TopKeys {
    sketch: Mutex<Sketch>,
    capacity: usize,
    half_life: Duration,
}

impl TopKeys {
    /// A sketch of `capacity` counters whose counts halve every
    /// `half_life`.
    pub fn new(capacity: usize, half_life: Duration) -> Self {
        Self {
            sketch: Mutex::new(Sketch {
                counters: Vec::with_capacity(capacity),
                last_decay: Instant::now(),
            }),
            capacity: capacity.max(1),
            half_life,
        }
    }

    /// Counts one limited request of `key`.
    pub fn record(&self, key: KeyId) {
        let mut s = self.sketch.lock();
        self.decay(&mut s);
        if let Some(c) = s.counters.iter_mut().find(|c| c.key == key) {
            c.count += 1;
            return;
        }
        if s.counters.len() < self.capacity {
            s.counters.push(TopKey {
                key,
                count: 1,
                error: 0,
            });
            return;
        }
        if let Some(min) = s.counters.iter_mut().min_by_key(|c| c.count) {
            *min = TopKey {
                key,
                count: min.count + 1,
                error: min.count,
            };
        }
    }

    fn decay(&self, s: &mut Sketch) {
        if self.half_life.is_zero() || s.last_decay.elapsed() < self.half_life {
            return;
        }
        s.last_decay = Instant::now();
        for c in &mut s.counters {
            c.count /= 2;
            c.error /= 2;
        }
        s.counters.retain(|c| c.count > 0);
    }

    /// The `k` most-limited keys, most limited first.
    pub fn top(&self, k: usize) -> Vec<TopKey> {
        let mut s = self.sketch.lock();
        self.decay(&mut s);
        let mut all = s.counters.clone();
        all.sort_by(|a, b| b.count.cmp(&a.count).then(a.key.0.cmp(&b.key.0)));
        all.truncate(k);
        all
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_heavy_hitters_in_bounded_memory() {
        // 64 counters over N = 11,750 refusals: every key refused more than
        // N / 64 ≈ 184 times is guaranteed a counter, and a newcomer's
        // inherited count stays at most about that, below the heavy keys'.
        let t = TopKeys::new(64, Duration::ZERO);
        // Three heavy keys among 10,000 that are limited once each.
        for i in 0..10_000u128 {
            t.record(KeyId(1_000_000 + i));
            if i % 10 == 0 {
                t.record(KeyId(1));
            }
            if i % 20 == 0 {
                t.record(KeyId(2));
            }
            if i % 40 == 0 {
                t.record(KeyId(3));
            }
        }
        let top = t.top(3);
        assert_eq!(
            top.iter().map(|k| k.key).collect::<Vec<_>>(),
            vec![KeyId(1), KeyId(2), KeyId(3)]
        );
        // Each count is an overestimate by at most its error.
        assert!(top[0].count >= 1000 && top[0].count - top[0].error <= 1000);
        assert_eq!(t.sketch.lock().counters.len(), 64);
    }

    #[test]
    fn counts_decay() {
        let t = TopKeys::new(4, Duration::from_millis(1));
        for _ in 0..8 {
            t.record(KeyId(5));
        }
        std::thread::sleep(Duration::from_millis(3));
        let top = t.top(1);
        assert!(top.is_empty() || top[0].count <= 4, "{top:?}");
    }

    #[test]
    fn labels_are_hashes() {
        let k = TopKey {
            key: KeyId(0xabcdef),
            count: 1,
            error: 0,
        };
        assert_eq!(k.label().len(), 16);
    }
}
