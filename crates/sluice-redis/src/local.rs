//! The local fallback: while Redis cannot decide, each instance enforces
//! its share (`1/expected_instances`) of every limit in memory, with the
//! same semantics as Redis, reserves included.
//!
//! A check's [reserve](crate::SharedCheck::reserve) is the cost the limit
//! must keep after the charge. Here the instance keeps the same share of
//! what may be used: a limit of burst `B` and reserve `R` becomes a local
//! limit of burst `⌈B/n⌉` whose checks may use `⌈(B − R)/n⌉` of it. With
//! one instance, that is the limit itself.
//!
//! A decision with a reserve peeks the limit, then charges it; decisions on
//! one (limit, key) are serialized by a striped lock around both steps, so
//! the reserve holds exactly among this instance's decisions, as on the
//! memory store.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_core::{Decision, LimitSpec, Limiter, Nanos};
use sluice_store::{Check, Checked, KeyId, Limit, MemoryStore, MemoryStoreConfig};
use smallvec::SmallVec;

use crate::shared::{SharedCheck, limit_tag, refuse_all, share_of};

/// How many locks serialize decisions with reserves (by limit and key).
const STRIPES: usize = 64;

/// One limit's local share.
#[derive(Debug)]
struct Share {
    limit: Arc<Limit>,
    spec: LimitSpec,
}

/// The local fallback's limits. See the module docs.
#[derive(Debug)]
pub(crate) struct LocalFallback {
    store: MemoryStore,
    shares: Mutex<HashMap<String, Arc<Share>>>,
    stripes: Box<[Mutex<()>]>,
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
            shares: Mutex::new(HashMap::new()),
            stripes: (0..STRIPES).map(|_| Mutex::new(())).collect(),
            instances: instances.max(1),
        }
    }

    /// Decides every check together on the local shares, all or nothing;
    /// `retry` is the retry time of a cost no share can ever admit.
    pub(crate) fn check(&self, checks: &[SharedCheck<'_>], retry: Nanos) -> Checked {
        let shares: SmallVec<[Arc<Share>; 4]> = checks.iter().map(|c| self.share(c)).collect();
        let reserves: SmallVec<[u64; 4]> = checks
            .iter()
            .zip(&shares)
            .map(|(c, s)| local_reserve(c.spec.burst, c.reserve, s.spec.burst, self.instances))
            .collect();
        let local: SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .zip(&shares)
            .map(|(c, s)| Check {
                limit: &s.limit,
                key: c.key,
                cost: c.cost,
            })
            .collect();
        let never = || refuse_all(checks, retry);
        // Peek and charge under the locks of every (limit, key) involved,
        // taken in order (a charge without a reserve too, so that it cannot
        // slip between another request's peek and charge).
        let mut stripes: SmallVec<[usize; 4]> =
            checks.iter().map(|c| stripe(c.limit_id, c.key)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _held: SmallVec<[_; 4]> = stripes.iter().map(|&s| self.stripes[s].lock()).collect();
        for (i, check) in local.iter().enumerate() {
            let reserve = reserves[i];
            if reserve == 0 {
                continue;
            }
            // Whether the cost fits with the reserve left over, and if not,
            // when it will, as the share's algorithm says (a fixed window
            // at its reset, a bucket at its refill).
            let need = check.cost.saturating_add(reserve);
            let Ok(probe) = self.store.peek_one(&Check {
                cost: need,
                ..*check
            }) else {
                return never();
            };
            if !probe.allowed {
                let now = self
                    .store
                    .peek_one(&Check { cost: 0, ..*check })
                    .unwrap_or_else(|_| Decision::full(0));
                // Refused for its reserve: nothing is charged; every limit
                // reports its state as it stands.
                let mut decisions: Vec<Decision> = local
                    .iter()
                    .zip(&reserves)
                    .map(|(c, r)| {
                        self.store
                            .peek_one(&Check { cost: 0, ..*c })
                            .map(|d| above(d, *r))
                            .unwrap_or_else(|_| Decision::full(0))
                    })
                    .collect();
                decisions[i] = Decision {
                    allowed: false,
                    retry_after: Some(probe.retry_after.unwrap_or(1).max(1)),
                    ..above(now, reserve)
                };
                return Checked {
                    allowed: false,
                    decisions,
                };
            }
        }
        let mut checked = match self.store.check(&local) {
            Ok(c) => c,
            // A cost the local share can never admit.
            Err(_) => return never(),
        };
        for (d, r) in checked.decisions.iter_mut().zip(&reserves) {
            *d = above(*d, *r);
        }
        checked
    }

    fn share(&self, check: &SharedCheck<'_>) -> Arc<Share> {
        let mut shares = self.shares.lock();
        if let Some(s) = shares.get(check.limit_id) {
            return s.clone();
        }
        let spec = share_of(check.spec, self.instances);
        let limiter = Limiter::new(&spec).unwrap_or(*check.limiter);
        let share = Arc::new(Share {
            limit: self.store.limit(check.limit_id, limiter),
            spec,
        });
        shares.insert(check.limit_id.to_owned(), share.clone());
        share
    }

    /// Forgets local limits that no longer exist (after a reload).
    pub(crate) fn retain(&self, keep: impl Fn(&str) -> bool) {
        self.shares.lock().retain(|id, _| keep(id));
    }

    /// How many limits have a local share.
    pub(crate) fn len(&self) -> usize {
        self.shares.lock().len()
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

/// A decision as counted above a reserve.
fn above(d: Decision, reserve: u64) -> Decision {
    Decision {
        remaining: d.remaining.saturating_sub(reserve),
        ..d
    }
}

/// The lock stripe of a (limit, key).
fn stripe(limit_id: &str, key: KeyId) -> usize {
    let h = limit_tag(limit_id) ^ (key.0 as u64) ^ ((key.0 >> 64) as u64);
    (h % STRIPES as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

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
            algorithm: sluice_core::AlgorithmKind::FixedWindow,
            rate: "10/min".parse().unwrap(),
            burst: 10,
            nodelay: false,
        };
        let limiter = spec.build().unwrap();
        let local = LocalFallback::new(1, 1000);
        let check = |reserve| SharedCheck {
            limit_id: "w",
            spec: &spec,
            limiter: &limiter,
            key: KeyId(7),
            cost: 1,
            reserve,
        };
        for _ in 0..5 {
            assert!(local.check(&[check(5)], 1).allowed);
        }
        let class = local.check(&[check(5)], 1);
        assert!(!class.allowed);
        for _ in 0..5 {
            assert!(local.check(&[check(0)], 1).allowed);
        }
        let full = local.check(&[check(0)], 1);
        assert!(!full.allowed);
        let wait = |c: &Checked| c.decisions[0].retry_after.unwrap();
        let (class, full) = (wait(&class), wait(&full));
        assert!(
            class >= full && class - full < 10_000_000,
            "class {class} ns, full window {full} ns"
        );
    }
}
