//! Keys in debt now, per limit: from the settlements of this instance that
//! put a key into debt, each remembered with its debt and the time the
//! limit's rate pays it off ([`Debt`]), until then. The debt outstanding
//! is estimated as paid off evenly over that time (buckets and GCRA pay it
//! so; the windows in steps, at the same average).
//!
//! Bounded: at most [`MAX_KEYS`] keys per limit (limits come from the
//! config); a full limit forgets the key whose debt ends soonest.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_policy::Debt;
use sluice_store::KeyId;

/// The most keys in debt remembered per limit.
pub(super) const MAX_KEYS: usize = 10_000;

/// One key's debt.
#[derive(Debug, Clone, Copy)]
struct Owed {
    units: u64,
    from: Instant,
    until: Instant,
}

impl Owed {
    /// What is left of it at `now`.
    fn left(&self, now: Instant) -> u64 {
        let whole = self.until.saturating_duration_since(self.from).as_nanos();
        let rest = self.until.saturating_duration_since(now).as_nanos();
        if whole == 0 {
            return 0;
        }
        u64::try_from(u128::from(self.units) * rest / whole).unwrap_or(u64::MAX)
    }
}

/// One limit's keys in debt now: how many, and their debt outstanding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InDebt {
    /// Keys in debt.
    pub keys: u64,
    /// Their debt, in units of cost (estimated: see the module docs).
    pub units: u64,
}

/// The keys in debt of every limit.
#[derive(Debug, Default)]
pub(super) struct Debts {
    by_limit: Mutex<HashMap<Arc<str>, HashMap<KeyId, Owed>>>,
}

impl Debts {
    /// `key` of `limit` is in `debt` at `now` (replacing what was known of
    /// it: the debt is the key's whole debt).
    pub(super) fn record(&self, limit: &Arc<str>, key: KeyId, debt: Debt, now: Instant) {
        let owed = Owed {
            units: debt.units,
            from: now,
            until: now + Duration::from_nanos(debt.paid_off_in),
        };
        let mut all = self.by_limit.lock();
        let keys = all.entry(limit.clone()).or_default();
        if keys.len() >= MAX_KEYS && !keys.contains_key(&key) {
            keys.retain(|_, o| o.until > now);
        }
        if keys.len() >= MAX_KEYS && !keys.contains_key(&key) {
            let soonest = keys.iter().min_by_key(|(_, o)| o.until).map(|(k, _)| *k);
            if let Some(k) = soonest {
                keys.remove(&k);
            }
        }
        keys.insert(key, owed);
    }

    /// Each limit's keys in debt at `now` (limits that had some, with 0
    /// once paid off).
    pub(super) fn at(&self, now: Instant) -> BTreeMap<Arc<str>, InDebt> {
        let mut all = self.by_limit.lock();
        all.iter_mut()
            .map(|(limit, keys)| {
                keys.retain(|_, o| o.until > now);
                let units = keys.values().map(|o| o.left(now)).sum();
                let keys = u64::try_from(keys.len()).unwrap_or(u64::MAX);
                (limit.clone(), InDebt { keys, units })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_debt_is_paid_off_evenly_and_forgotten_once_paid() {
        let debts = Debts::default();
        let limit: Arc<str> = "tokens".into();
        let t0 = Instant::now();
        let second = 1_000_000_000;
        debts.record(
            &limit,
            KeyId(1),
            Debt {
                paid_off_in: 4 * second,
                units: 400,
            },
            t0,
        );
        debts.record(
            &limit,
            KeyId(2),
            Debt {
                paid_off_in: second,
                units: 10,
            },
            t0,
        );
        let at = |s| debts.at(t0 + Duration::from_secs(s))[&limit];
        assert_eq!(
            at(0),
            InDebt {
                keys: 2,
                units: 410
            }
        );
        assert_eq!(
            at(2),
            InDebt {
                keys: 1,
                units: 200
            }
        );
        assert_eq!(at(4), InDebt { keys: 0, units: 0 });
        // A key settled again: its whole debt replaces what was known.
        debts.record(
            &limit,
            KeyId(1),
            Debt {
                paid_off_in: second,
                units: 5,
            },
            t0,
        );
        assert_eq!(at(0), InDebt { keys: 1, units: 5 });
    }

    #[test]
    fn a_full_limit_forgets_the_debt_that_ends_soonest() {
        let debts = Debts::default();
        let limit: Arc<str> = "tokens".into();
        let t0 = Instant::now();
        for i in 0..MAX_KEYS as u64 + 1 {
            let debt = Debt {
                paid_off_in: 1_000_000 * (i + 1),
                units: 1,
            };
            debts.record(&limit, KeyId(u128::from(i)), debt, t0);
        }
        let now = debts.at(t0)[&limit];
        assert_eq!(now.keys, MAX_KEYS as u64);
        assert!(!debts.by_limit.lock()[&limit].contains_key(&KeyId(0)));
    }
}
