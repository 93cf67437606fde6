//! The per-request limit override (`RateLimitDescriptor.limit`): Envoy's
//! route config may give a descriptor its own limit, which then applies
//! instead of the config's, as in the reference server (its `GetLimit`):
//! in a configured domain, for the descriptor's entries as they are, with
//! no name, no shadow mode and no `replaces`.
//!
//! Each distinct (requests per unit, unit) is a limit of its own, created
//! on first use. The client chooses these numbers, so the limits are kept
//! in a bounded map: past [`MAX_OVERRIDES`] distinct ones, an override
//! is ignored (logged at most once a minute) and the config's limit
//! applies.

use std::collections::HashMap;
use std::sync::Arc;
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
#[derive(Debug, Default)]
pub struct Overrides {
    /// Read by every call that carries an override; written only when a
    /// new one is made.
    rules: RwLock<HashMap<(u32, Unit), Arc<Rule>>>,
    last_warned: Mutex<Option<Instant>>,
}

impl Overrides {
    /// The rule of an override: `None` for an unknown unit, or when the map
    /// is full.
    pub fn rule(
        &self,
        o: &RateLimitOverride,
        store: &dyn Store,
        algorithm: AlgorithmKind,
    ) -> Option<Arc<Rule>> {
        let unit = Unit::from_proto(o.unit)?;
        let key = (o.requests_per_unit, unit);
        if let Some(known) = self.known(&self.rules.read(), &key) {
            return known;
        }
        // Made outside the lock (it registers a counter with the store);
        // two calls that race make the same rule, and the first kept wins.
        let made = Arc::new(new_rule(key.0, unit, store, algorithm)?);
        let mut rules = self.rules.write();
        if let Some(known) = self.known(&rules, &key) {
            return known;
        }
        rules.insert(key, made.clone());
        Some(made)
    }

    /// What `rules` answer for `key` without a new rule: the rule kept, or
    /// nothing (warned) when they are full; `None` when there is room for
    /// one.
    fn known(
        &self,
        rules: &HashMap<(u32, Unit), Arc<Rule>>,
        key: &(u32, Unit),
    ) -> Option<Option<Arc<Rule>>> {
        if let Some(rule) = rules.get(key) {
            return Some(Some(rule.clone()));
        }
        if rules.len() >= MAX_OVERRIDES {
            self.warn_full();
            return Some(None);
        }
        None
    }

    fn warn_full(&self) {
        let mut last = self.last_warned.lock();
        if last.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
            *last = Some(Instant::now());
            tracing::warn!(
                "more than {MAX_OVERRIDES} distinct per-request limits: further ones are ignored and the config's limits apply"
            );
        }
    }
}

fn new_rule(rpu: u32, unit: Unit, store: &dyn Store, algorithm: AlgorithmKind) -> Option<Rule> {
    let name: Arc<str> = format!("override_{rpu}_per_{}", unit.seconds()).into();
    let labels = LimitLabels::named(name, "envoy");
    let kind = if rpu == 0 {
        RuleKind::Zero
    } else {
        let id = format!("envoy-override:{rpu}/{}", unit.seconds());
        RuleKind::Counted(Box::new(
            limited(&id, rpu, unit, algorithm, labels.clone(), store).ok()?,
        ))
    };
    Some(Rule {
        path: labels.limit.clone(),
        detailed: false,
        labels,
        given_name: String::new(),
        unit,
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
}
