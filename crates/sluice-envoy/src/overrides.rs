//! The per-request limit override (`RateLimitDescriptor.limit`): Envoy's
//! route config may give a descriptor its own limit, which then applies
//! instead of the config's, as in the reference server (its `GetLimit`):
//! in a configured domain, for the descriptor's entries as they are, with
//! no name, no shadow mode and no `replaces`.
//!
//! Each distinct (requests per unit, unit) is a limit of its own, created
//! on first use. The client chooses these numbers, so the limits are kept
//! in a bounded map of [`MAX_OVERRIDES`]. When it is full, a new override
//! first takes the place of one unused for two of its units (its counts
//! have all come back by then, whatever the algorithm: forgetting it
//! loses nothing); with none such, it is ignored (logged at most once a
//! minute) and the config's limit applies. A client that keeps that many
//! overrides in use still fills the map; the others' older overrides keep
//! working.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use parking_lot::{Mutex, RwLock};
use sluice_core::AlgorithmKind;
use sluice_policy::LimitLabels;
use sluice_store::seam::Store;

use crate::compile::limited;
use crate::rules::{Rule, RuleKind, Unit};

/// The most distinct per-request limits kept.
pub const MAX_OVERRIDES: usize = 256;

/// The per-request limits in use, by (requests per unit, unit).
#[derive(Debug)]
pub struct Overrides {
    /// Read by every call that carries an override; written only when a
    /// new one is made.
    rules: RwLock<HashMap<(u32, Unit), Kept>>,
    /// What the times of use count from.
    start: Instant,
    /// While the map is full: the earliest time (ms from `start`) one of
    /// its overrides can be unused for long enough to give its place.
    /// Before it, a new override is ignored without a write lock and
    /// without making its limit.
    full_until: AtomicU64,
    /// How many override limits have been made (registered with the
    /// store): what the tests read to see that a full map makes none.
    #[cfg(test)]
    made: AtomicU64,
    last_warned: Mutex<Option<Instant>>,
}

impl Default for Overrides {
    fn default() -> Self {
        Self {
            rules: RwLock::default(),
            start: Instant::now(),
            full_until: AtomicU64::new(0),
            #[cfg(test)]
            made: AtomicU64::new(0),
            last_warned: Mutex::default(),
        }
    }
}

/// A per-request limit kept, and when it was last used.
#[derive(Debug)]
struct Kept {
    rule: Arc<Rule>,
    /// Milliseconds from [`Overrides::start`].
    used: AtomicU64,
}

impl Kept {
    /// Marks the rule used at `now` (ms) and hands it out.
    fn use_at(&self, now: u64) -> Arc<Rule> {
        if self.used.load(Ordering::Relaxed) < now {
            self.used.fetch_max(now, Ordering::Relaxed);
        }
        self.rule.clone()
    }

    /// When (ms) it will have been unused for two of its units: every
    /// algorithm's counts have all come back by then (a sliding window's
    /// previous window included).
    fn idle_from(&self) -> u64 {
        let units = 2 * self.rule.unit.map_or(1, Unit::seconds) * 1_000;
        self.used.load(Ordering::Relaxed).saturating_add(units)
    }
}

impl Overrides {
    /// The rule of an override: `None` for an unknown unit, or when the map
    /// is full of overrides in use.
    pub fn rule(
        &self,
        o: &RateLimitOverride,
        store: &dyn Store,
        algorithm: AlgorithmKind,
    ) -> Option<Arc<Rule>> {
        self.rule_at(o, store, algorithm, Instant::now())
    }

    /// [`rule`](Self::rule) at `now`.
    fn rule_at(
        &self,
        o: &RateLimitOverride,
        store: &dyn Store,
        algorithm: AlgorithmKind,
        now: Instant,
    ) -> Option<Arc<Rule>> {
        let unit = Unit::from_proto(o.unit)?;
        let key = (o.requests_per_unit, unit);
        let ms = u64::try_from(now.saturating_duration_since(self.start).as_millis())
            .unwrap_or(u64::MAX);
        {
            let rules = self.rules.read();
            if let Some(kept) = rules.get(&key) {
                return Some(kept.use_at(ms));
            }
            if rules.len() >= MAX_OVERRIDES && ms < self.full_until.load(Ordering::Relaxed) {
                self.warn_full();
                return None;
            }
        }
        // Made outside the lock (it registers a counter with the store);
        // two calls that race make the same rule, and the first kept wins.
        let made = Arc::new(new_rule(key.0, unit, store, algorithm)?);
        #[cfg(test)]
        self.made.fetch_add(1, Ordering::Relaxed);
        let mut rules = self.rules.write();
        if let Some(kept) = rules.get(&key) {
            return Some(kept.use_at(ms));
        }
        if rules.len() >= MAX_OVERRIDES {
            rules.retain(|_, kept| kept.idle_from() > ms);
        }
        if rules.len() >= MAX_OVERRIDES {
            let next = rules.values().map(Kept::idle_from).min().unwrap_or(0);
            self.full_until.store(next, Ordering::Relaxed);
            self.warn_full();
            return None;
        }
        let kept = Kept {
            rule: made.clone(),
            used: AtomicU64::new(ms),
        };
        rules.insert(key, kept);
        Some(made)
    }

    fn warn_full(&self) {
        let mut last = self.last_warned.lock();
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(Instant::now());
            tracing::warn!(
                "more than {MAX_OVERRIDES} distinct per-request limits in use: further ones are ignored and the config's limits apply"
            );
        }
    }
}

fn new_rule(rpu: u32, unit: Unit, store: &dyn Store, algorithm: AlgorithmKind) -> Option<Rule> {
    let name: Arc<str> = format!("override_{rpu}_per_{}", unit.seconds()).into();
    // A counted handle: the client picks the values, which must not be
    // kept for the life of the process.
    let labels = LimitLabels::named(name, "envoy");
    let kind = if rpu == 0 {
        RuleKind::Zero
    } else {
        let id = format!("envoy-override:{rpu}/{}", unit.seconds());
        RuleKind::Counted(Box::new(
            limited(&id, rpu, unit, algorithm, |_| labels.clone(), store).ok()?,
        ))
    };
    Some(Rule {
        // One statistics series per unit, not one per client-chosen value.
        path: format!("override_per_{}", unit.seconds()).into(),
        detailed: false,
        labels,
        given_name: String::new(),
        unit: Some(unit),
        requests_per_unit: rpu,
        replaces: Vec::new(),
        shadow: false,
        quota: false,
        kind,
        metadata: None,
        stats: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_store::{MemoryStore, MemoryStoreConfig};

    #[test]
    fn at_most_max_overrides_distinct_limits_are_kept() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let o = Overrides::default();
        let of = |rpu| RateLimitOverride {
            requests_per_unit: rpu,
            unit: 1,
        };
        for rpu in 1..=MAX_OVERRIDES as u32 {
            assert!(
                o.rule(&of(rpu), &store, AlgorithmKind::FixedWindow)
                    .is_some()
            );
        }
        // Full: a new one is ignored, a known one still found.
        assert!(
            o.rule(&of(100_000), &store, AlgorithmKind::FixedWindow)
                .is_none()
        );
        assert!(o.rule(&of(1), &store, AlgorithmKind::FixedWindow).is_some());
        assert!(
            o.rule(
                &RateLimitOverride {
                    requests_per_unit: 1,
                    unit: 0
                },
                &store,
                AlgorithmKind::FixedWindow
            )
            .is_none(),
            "UNKNOWN unit"
        );
        assert_eq!(o.rules.read().len(), MAX_OVERRIDES);
    }

    #[test]
    fn a_full_map_makes_room_from_overrides_unused_for_two_units() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let o = Overrides::default();
        let of = |rpu, unit| RateLimitOverride {
            requests_per_unit: rpu,
            unit,
        };
        let at = |secs| o.start + Duration::from_secs(secs);
        let alg = AlgorithmKind::FixedWindow;
        // Full: per-second overrides, and one per minute.
        for rpu in 1..MAX_OVERRIDES as u32 {
            assert!(o.rule_at(&of(rpu, 1), &store, alg, at(0)).is_some());
        }
        assert!(o.rule_at(&of(7, 2), &store, alg, at(0)).is_some());
        assert!(o.rule_at(&of(100_000, 1), &store, alg, at(1)).is_none());
        // One per-second override stays in use.
        assert!(o.rule_at(&of(1, 1), &store, alg, at(2)).is_some());
        // Two seconds after their last use, the per-second ones unused
        // since are forgotten; the one in use and the per-minute one are
        // kept. Until then, a new one is turned away without a limit made.
        let made = o.made.load(Ordering::Relaxed);
        assert!(o.rule_at(&of(100_001, 1), &store, alg, at(1)).is_none());
        assert_eq!(
            o.made.load(Ordering::Relaxed),
            made,
            "no limit made while full"
        );
        assert!(o.rule_at(&of(100_000, 1), &store, alg, at(2)).is_some());
        let rules = o.rules.read();
        assert_eq!(rules.len(), 3);
        assert!(rules.contains_key(&(1, Unit::Second)));
        assert!(rules.contains_key(&(7, Unit::Minute)));
    }

    #[test]
    fn overrides_of_one_unit_share_one_statistics_series() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let o = Overrides::default();
        let rule = |rpu, unit| {
            let of = RateLimitOverride {
                requests_per_unit: rpu,
                unit,
            };
            o.rule(&of, &store, AlgorithmKind::FixedWindow).unwrap()
        };
        // Values a client picks do not name series: one per unit.
        assert_eq!(rule(5, 1).path, rule(6, 1).path);
        assert_ne!(rule(5, 1).path, rule(5, 2).path);
    }

    /// An override's labels carry values a client picks: each is a counted
    /// handle, freed with its rule, never kept for the life of the process
    /// (where equal labels would be one, found again).
    #[test]
    fn override_labels_are_not_kept() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let made = || new_rule(41, Unit::Minute, &store, AlgorithmKind::Gcra).unwrap();
        let (a, b) = (made(), made());
        assert_eq!(a.labels, b.labels, "the same labels");
        assert_ne!(a.labels.addr(), b.labels.addr(), "each rule its own");
        let RuleKind::Counted(limited) = &a.kind else {
            unreachable!("a limit of 41 per minute is counted")
        };
        assert_eq!(limited.limit.labels.addr(), a.labels.addr());
    }
}
