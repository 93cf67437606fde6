//! Carry-over: a key that changes plan keeps the share of quota it has
//! used (`[client] carry_over = "proportional"`, the default).
//!
//! Limits are paired by name, else by position: the n-th limit of the new
//! plan takes the used fraction of the n-th limit of the old one. Only
//! limits counted by the client key take part. If the old limit is 75 %
//! used now, the new one is charged until it is 75 % used (it is never
//! refunded: a key that already used more of the new plan keeps that).
//! The used shares are peeked on the store and the new plan's limits
//! charged there, once, by the instance that made the change. If the store
//! cannot answer (a fallback decided), nothing is carried: the key starts
//! the new plan fresh.

use sluice_core::Clock;
use sluice_store::KeyId;
use sluice_store::seam::Check;

use super::Engine;
use crate::config::CarryOver;
use crate::policy::{LimitDef, Policy};

impl<C: Clock> Engine<C> {
    /// Carries a key's used quota from plan `from` to plan `to`. See the
    /// module docs.
    pub(super) async fn carry_over(&self, key: &str, from: &str, to: &str) {
        let current = self.current.load_full();
        let id = self.hasher.key_id(key);
        for (oi, ni) in carry_pairs(&current.policy, from, to) {
            let policy = &current.policy;
            let (old_def, new_def) = (&policy.limits()[oi], &policy.limits()[ni]);
            let Some(used_old) = self.used(&current.counters[oi], old_def, id).await else {
                continue;
            };
            let Some(used_new) = self.used(&current.counters[ni], new_def, id).await else {
                continue;
            };
            let charge = carry_charge(old_def, new_def, used_old, used_new);
            if charge > 0 {
                let check = Check {
                    counter: &current.counters[ni],
                    key: id,
                    cost: charge,
                    reserve: 0,
                    lease: None,
                };
                let _ = self.store.check(&[check]).await;
            }
        }
    }

    /// How much of a limit's burst a key has used now (a peek); `None` when
    /// the store could not say.
    async fn used(
        &self,
        counter: &sluice_store::seam::Counter,
        def: &LimitDef,
        key: KeyId,
    ) -> Option<u64> {
        let peek = Check {
            counter,
            key,
            cost: 0,
            reserve: 0,
            lease: None,
        };
        let decided = self.store.check(&[peek]).await.ok()?;
        if decided.fallback().is_some() {
            return None;
        }
        let d = decided.decisions.first()?;
        let extra = def.limit.delay.map_or(0, |d| d.extra);
        Some(
            def.limit
                .spec
                .burst
                .saturating_sub(d.remaining.saturating_sub(extra)),
        )
    }
}

/// The limits a plan change carries used quota between: `(old, new)`
/// pairs of limit indices, paired by name, else by position, among the
/// limits counted by the client key. Empty with `carry_over = "reset"` or
/// the same plan.
fn carry_pairs(policy: &Policy, from: &str, to: &str) -> Vec<(usize, usize)> {
    if from == to || policy.carry_over == CarryOver::Reset {
        return Vec::new();
    }
    let Some(client) = policy.client_key() else {
        return Vec::new();
    };
    let eligible = |plan: &str| -> Vec<usize> {
        policy
            .plan_limits(plan)
            .iter()
            .copied()
            .filter(|&i| policy.limits()[i].key == *client)
            .collect()
    };
    let (old, new) = (eligible(from), eligible(to));
    new.iter()
        .enumerate()
        .filter_map(|(n, &ni)| {
            old.iter()
                .copied()
                .find(|&oi| policy.limits()[oi].limit.name == policy.limits()[ni].limit.name)
                .or_else(|| old.get(n).copied())
                .map(|oi| (oi, ni))
        })
        .collect()
}

/// What the new limit must be charged so that its used share matches the
/// old one's (rounded to nearest; never a refund).
fn carry_charge(old_def: &LimitDef, new_def: &LimitDef, used_old: u64, used_new: u64) -> u64 {
    let (b_old, b_new) = (old_def.limit.spec.burst.max(1), new_def.limit.spec.burst);
    let target =
        (u128::from(used_old) * u128::from(b_new) + u128::from(b_old / 2)) / u128::from(b_old);
    let target = u64::try_from(target).unwrap_or(b_new).min(b_new);
    target.saturating_sub(used_new)
}
