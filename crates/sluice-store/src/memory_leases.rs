//! Leases on the memory store (see [`LeaseId`](crate::seam::LeaseId)): a
//! group of checks that names a lease, or meets a concurrency limit with
//! leases held, ends the leases of its keys that ran out (their slots
//! given back), is decided as any group is, then takes or renews its own.
//! A refund naming a lease gives back what that lease holds, nothing more.
//! Leases are timed by the store's clock as it reads: one that steps back
//! ends them later, never earlier.

use sluice_core::{Clock, Nanos};
use smallvec::SmallVec;

use crate::key::KeyId;
use crate::leases::Leases;
use crate::limit::Limit;
use crate::memory::MemoryStore;
use crate::seam::{Check, Checked, StoreError};

/// The leases of a check's limit: a concurrency limit of this store.
#[inline]
fn leases_of<'a>(check: &Check<'a>) -> Option<&'a Leases> {
    check.counter.slot().get::<Limit>()?.leases.as_ref()
}

/// Whether a group goes through leases: a check names one on a
/// concurrency limit, or meets one whose keys have leases held.
#[inline]
pub(crate) fn leased(checks: &[Check<'_>]) -> bool {
    checks
        .iter()
        .any(|c| leases_of(c).is_some_and(|l| c.lease.is_some() || !l.is_empty()))
}

impl<C: Clock> MemoryStore<C> {
    /// Gives `amount` slots back to `key` of `limit`, under its shard's
    /// lock, as a refund does.
    fn give_back(&self, limit: &Limit, key: KeyId, amount: u64) {
        let mut guard = limit.table.lock(limit.table.shard_of(key));
        let now = self.clock().now();
        guard.refund(key, now, amount);
    }

    /// Ends the leases of the checks' keys that ran out by `now`.
    fn end_leases(&self, checks: &[Check<'_>], now: Nanos) {
        for c in checks {
            let (Some(limit), Some(leases)) = (c.counter.slot().get::<Limit>(), leases_of(c))
            else {
                continue;
            };
            let back = leases.ended(c.key, now);
            if back > 0 {
                self.give_back(limit, c.key, back);
            }
        }
    }

    /// Ends every lease of `limit` that ran out by `now` (the periodic
    /// purge: keys no check names again).
    pub(crate) fn end_all_leases(&self, limit: &Limit, now: Nanos) {
        let Some(leases) = &limit.leases else {
            return;
        };
        for (key, back) in leases.all_ended(now) {
            self.give_back(limit, key, back);
        }
    }

    /// Decides a group that goes through leases (see the module docs):
    /// an admitted cost joins its lease; a cost of 0 renews it, whatever
    /// the decision.
    pub(crate) fn decide_leased(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        let now = self.clock().now();
        self.end_leases(checks, now);
        let checked = self.decide_plain(checks)?;
        for c in checks {
            let (Some(leases), Some(id)) = (leases_of(c), c.lease) else {
                continue;
            };
            if c.cost == 0 {
                leases.renew(c.key, id, now);
            } else if checked.allowed {
                leases.take(c.key, id, c.cost, now);
            }
        }
        Ok(checked)
    }

    /// Gives back a group's costs where some go through leases: a check
    /// naming a lease gives back what that lease holds of its cost.
    pub(crate) fn refund_leased(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        self.end_leases(checks, self.clock().now());
        let released: SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .map(|c| match (leases_of(c), c.lease) {
                (Some(leases), Some(id)) => Check {
                    cost: leases.release(c.key, id, c.cost),
                    ..*c
                },
                _ => *c,
            })
            .collect();
        self.refund_plain(&released)
    }
}
