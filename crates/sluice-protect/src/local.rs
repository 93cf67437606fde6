//! The local fallback: while the remote store cannot decide, each instance
//! enforces its share (`1/expected_instances`) of every limit in memory,
//! with the same semantics, reserves included.
//!
//! A check's [reserve](sluice_store::seam::Check::reserve) is the cost the
//! limit must keep after the charge. Here the instance keeps the same share
//! of what may be used: a limit of burst `B` and reserve `R` becomes a
//! local limit of burst `⌈B/n⌉` whose checks may use `⌈(B − R)/n⌉` of it.
//! With one instance, that is the limit itself. The memory store decides a
//! group of checks under the locks of every shard it touches, so the
//! reserve holds exactly among this instance's decisions.

use sluice_core::{Decision, Nanos};
use sluice_store::seam::{
    Check, Checked, Counter, CounterDef, DecidedBy, Fallback, Store, StoreError,
};
use sluice_store::{MemoryStore, MemoryStoreConfig};
use smallvec::SmallVec;

/// The local fallback's limits. See the module docs.
#[derive(Debug)]
pub(crate) struct LocalFallback {
    store: MemoryStore,
    instances: u32,
}

impl LocalFallback {
    /// A fallback for `instances` instances, tracking at most `max_keys`
    /// keys per limit.
    pub(crate) fn new(instances: u32, max_keys: usize) -> Self {
        Self {
            store: MemoryStore::new(MemoryStoreConfig {
                max_keys,
                shards: 0,
            }),
            instances: instances.max(1),
        }
    }

    /// This instance's share of a limit, registered in memory.
    pub(crate) fn share(&self, def: &CounterDef) -> Counter {
        self.store.counter(def.share(self.instances))
    }

    /// [`share`](Self::share), its state new (see
    /// [`Store::fresh_counter`](sluice_store::seam::Store::fresh_counter)).
    pub(crate) fn fresh_share(&self, def: &CounterDef) -> Counter {
        self.store.fresh_counter(def.share(self.instances))
    }

    /// Decides every check together on the local shares, all or nothing:
    /// `checks[i]` on `shares[i]`. `retry` is the retry time of a cost no
    /// share can ever admit.
    pub(crate) fn check(&self, checks: &[Check<'_>], shares: &[&Counter], retry: Nanos) -> Checked {
        let local: SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .zip(shares)
            .map(|(c, share)| Check {
                counter: share,
                key: c.key,
                cost: c.cost,
                reserve: local_reserve(
                    c.counter.def().spec().burst,
                    c.reserve,
                    share.def().spec().burst,
                    self.instances,
                ),
                lease: c.lease,
            })
            .collect();
        match self.store.decide_now(&local) {
            Ok(mut checked) => {
                checked.by = DecidedBy::Fallback(Fallback::Local);
                checked.share = self.instances;
                checked
            }
            // A cost the local share can never admit.
            Err(_) => Checked {
                share: self.instances,
                ..refuse_all(checks, retry, Fallback::Local)
            },
        }
    }

    /// Gives back each check's cost to its local share: `checks[i]` on
    /// `shares[i]`, answered as decided by the `by` fallback.
    pub(crate) fn refund(
        &self,
        checks: &[Check<'_>],
        shares: &[&Counter],
        by: Fallback,
    ) -> Result<Checked, StoreError> {
        let local: SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .zip(shares)
            .map(|(c, share)| Check {
                counter: share,
                reserve: 0,
                ..*c
            })
            .collect();
        let mut checked = self.store.refund_now(&local)?;
        checked.by = DecidedBy::Fallback(by);
        checked.share = self.instances;
        Ok(checked)
    }

    /// Charges `amount` to `key` of its local `share`, into debt up to
    /// `max_debt` (see [`Store::debit`]).
    pub(crate) fn debit(
        &self,
        share: &Counter,
        key: sluice_store::KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Result<sluice_core::Debited, StoreError> {
        self.store.debit_now(share, key, amount, max_debt)
    }

    /// How many limits have a live local share.
    pub(crate) fn len(&self) -> usize {
        self.store.live_limits()
    }

    /// Drops every fully replenished key. Returns how many.
    pub(crate) fn purge_idle(&self) -> usize {
        self.store.purge_expired()
    }
}

/// The reserve of a local share of burst `local_burst`, for a limit of
/// burst `burst` with reserve `reserve` shared by `instances`: the share
/// may use `⌈(burst − reserve)/instances⌉`.
pub(crate) fn local_reserve(burst: u64, reserve: u64, local_burst: u64, instances: u32) -> u64 {
    if reserve == 0 {
        return 0;
    }
    let usable = burst.saturating_sub(reserve);
    local_burst.saturating_sub(usable.div_ceil(u64::from(instances.max(1))))
}

/// Every check refused, empty, with `retry` as the wait: the `deny`
/// fallback's answer, and the local fallback's to a cost no share admits.
pub(crate) fn refuse_all(checks: &[Check<'_>], retry: Nanos, by: Fallback) -> Checked {
    Checked {
        allowed: false,
        decisions: checks
            .iter()
            .map(|c| Decision {
                allowed: false,
                limit: c.counter.def().spec().burst,
                remaining: 0,
                reset_after: retry,
                retry_after: Some(retry),
                delay: 0,
            })
            .collect(),
        by: DecidedBy::Fallback(by),
        share: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec};
    use sluice_store::KeyId;

    #[test]
    fn one_instance_keeps_the_reserve_and_many_keep_their_share_of_the_rest() {
        assert_eq!(local_reserve(100, 20, 100, 1), 20);
        assert_eq!(local_reserve(100, 0, 100, 1), 0);
        // 4 instances: 25 each, of which ⌈80/4⌉ = 20 may be used.
        assert_eq!(local_reserve(100, 20, 25, 4), 5);
        // Nothing usable: all of it is kept.
        assert_eq!(local_reserve(10, 10, 4, 3), 4);
    }

    /// A request refused for the reserve waits as the share's algorithm
    /// says: for a fixed window, its reset, the same wait as a request
    /// refused by the full window a moment later (not the rate's refill of
    /// the one missing request, 6 s).
    #[test]
    fn a_refusal_for_the_reserve_waits_as_the_algorithm_says() {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::FixedWindow,
            rate: "10/min".parse().unwrap(),
            burst: 10,
            nodelay: false,
        };
        let def = CounterDef::new("w", spec).unwrap();
        // The remote's counter: only its definition is read here.
        let remote = Counter::new(def.clone(), sluice_store::seam::Slot::empty());
        let local = LocalFallback::new(1, 1000);
        let share = local.share(&def);
        let check = |reserve| Check {
            counter: &remote,
            key: KeyId(7),
            cost: 1,
            reserve,
            lease: None,
        };
        let decide = |reserve| local.check(&[check(reserve)], &[&share], 1);
        for _ in 0..5 {
            assert!(decide(5).allowed);
        }
        let class = decide(5);
        assert!(!class.allowed);
        assert_eq!(class.by, DecidedBy::Fallback(Fallback::Local));
        for _ in 0..5 {
            assert!(decide(0).allowed);
        }
        let full = decide(0);
        assert!(!full.allowed);
        let wait = |c: &Checked| c.decisions[0].retry_after.unwrap();
        let (class, full) = (wait(&class), wait(&full));
        assert!(
            class >= full && class - full < 10_000_000,
            "class {class} ns, full window {full} ns"
        );
    }
}
