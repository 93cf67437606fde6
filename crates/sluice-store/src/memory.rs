//! The in-memory store: sharded, bounded, all-or-nothing.
//!
//! Each limit has its own [table](crate::table::Table) of keys, spread over
//! many shards, each a small hash map behind its own mutex: a check locks one
//! shard for a few nanoseconds and never a global lock. A GCRA limit whose
//! emission interval is a whole number of nanoseconds (every rate of whole
//! requests per second, minute or hour that divides a second evenly, and
//! most others) has the fast table instead
//! ([`atomic_table`](crate::atomic_table)): each key one atomic word under
//! its shard's reader-writer lock, a known key's check a shared lock and a
//! compare-and-swap. A request that meets
//! several limits locks the shards it needs in one global order (no
//! deadlock), decides every limit, and commits all of them only if all allow
//! it: a refused request consumes nothing anywhere.
//!
//! Memory is bounded two ways. A key whose state has fully replenished is
//! worth nothing and is dropped (lazily when its shard fills, and by
//! [`MemoryStore::purge_expired`]). And each limit holds at most
//! [`MemoryStoreConfig::max_keys`] keys; when a full shard must take a new
//! key, it evicts the eighth of its keys that are closest to full
//! replenishment. Eviction therefore errs towards *admitting*: an evicted key
//! comes back with a full quota. That is deliberate: the alternative
//! (refusing new keys when full) would let an attacker who sprays random keys
//! lock out every new legitimate client, while evicting the nearly
//! replenished keys forgives at most a small remainder of their quota.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use sluice_core::{CheckError, Clock, Decision, Limiter, Nanos, Outcome, SystemClock, Update};
use smallvec::SmallVec;

use crate::key::KeyId;
use crate::limit::{AnyTable, Guard, Limit};
use crate::seam::Decisions;

/// Sizing of a [`MemoryStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryStoreConfig {
    /// The most keys each limit holds at once.
    pub max_keys: usize,
    /// Shards per limit, rounded up to a power of two; 0 picks a number from
    /// the CPUs.
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
    /// The limit.
    pub limit: &'a Limit,
    /// The client's key id.
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
    /// Inline for up to four: a check allocates nothing.
    pub decisions: Decisions,
}

/// The embedded, in-process store. See the module docs.
pub struct MemoryStore<C: Clock = SystemClock> {
    config: MemoryStoreConfig,
    shards: usize,
    limits: Mutex<Registry>,
    clock: C,
}

#[derive(Default)]
struct Registry {
    by_id: HashMap<String, Weak<Limit>>,
    next_serial: u64,
}

impl<C: Clock> std::fmt::Debug for MemoryStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("config", &self.config)
            .field("shards", &self.shards)
            .finish_non_exhaustive()
    }
}

/// Whether two checks name the same state.
fn same_state(a: &Check<'_>, b: &Check<'_>) -> bool {
    std::ptr::eq(a.limit, b.limit) && a.key == b.key
}

/// Folds checks that name the same (limit, key) into one with their summed
/// cost, so that a request is never decided against a state it has already
/// changed. Returns `None` when there are no duplicates (the common case),
/// else the unique checks and, for each original check, its unique index.
/// Where a check's state lives: its limit and shard. Locks are taken in
/// this order.
pub(crate) fn slot(c: &Check<'_>) -> (u64, usize) {
    (c.limit.serial, c.limit.table.shard_of(c.key))
}

/// A check and its [`slot`], found once.
pub(crate) type Slotted<'c, 'a> = (&'c Check<'a>, (u64, usize));

/// A check's decision once the request's fate is known: committed when the
/// request is allowed; when it is not, the refusal, or (for a limit that
/// would have allowed it) the limit as it stands, uncharged.
pub(crate) fn settle(
    guard: &mut Guard<'_>,
    check: &Check<'_>,
    outcome: Outcome<Update>,
    allowed: bool,
    now: Nanos,
) -> Result<Decision, CheckError> {
    if allowed {
        if let Some(update) = outcome.update {
            guard.commit(check.key, update, now);
        }
        Ok(outcome.decision)
    } else if outcome.decision.allowed {
        Ok(guard.peek(check.key, now, 0)?.decision)
    } else {
        Ok(outcome.decision)
    }
}

fn merge_duplicates<'a>(checks: &[Check<'a>]) -> Option<(Vec<Check<'a>>, Vec<usize>)> {
    let duplicated =
        (1..checks.len()).any(|i| checks[..i].iter().any(|c| same_state(c, &checks[i])));
    if !duplicated {
        return None;
    }
    let mut unique: Vec<Check<'a>> = Vec::with_capacity(checks.len());
    let mut index = Vec::with_capacity(checks.len());
    for c in checks {
        match unique.iter().position(|u| same_state(u, c)) {
            Some(i) => {
                unique[i].cost = unique[i].cost.saturating_add(c.cost);
                index.push(i);
            }
            None => {
                index.push(unique.len());
                unique.push(*c);
            }
        }
    }
    Some((unique, index))
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
        let shards = if config.shards == 0 {
            (cpus * 32).max(64)
        } else {
            config.shards
        };
        Self {
            config,
            shards: shards.next_power_of_two(),
            limits: Mutex::new(Registry::default()),
            clock,
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// The state of the limit with identity `id`, created on first use.
    ///
    /// The same `id` gives the same state for as long as any handle to it
    /// lives, so a config reload that keeps a limit's definition keeps its
    /// counters. `id` should change whenever the definition does.
    pub fn limit(&self, id: &str, limiter: Limiter) -> Arc<Limit> {
        let mut reg = self.limits.lock();
        let existing = reg.by_id.get(id).and_then(Weak::upgrade);
        if let Some(limit) = existing.filter(|l| l.limiter() == limiter) {
            return limit;
        }
        self.create(&mut reg, id, limiter)
    }

    /// A new state for the limit with identity `id`, empty even while an
    /// earlier one lives: from now on [`limit`](Self::limit) gives this
    /// one for `id`. A reload takes it for a limit the replaced policy did
    /// not have, so that no leftover handle brings old counts back.
    pub fn fresh_limit(&self, id: &str, limiter: Limiter) -> Arc<Limit> {
        let mut reg = self.limits.lock();
        self.create(&mut reg, id, limiter)
    }

    fn create(&self, reg: &mut Registry, id: &str, limiter: Limiter) -> Arc<Limit> {
        reg.next_serial += 1;
        let limit = Arc::new(Limit {
            id: id.to_owned(),
            serial: reg.next_serial,
            limiter,
            table: AnyTable::new(limiter, self.shards, self.config.max_keys),
            leases: match limiter {
                Limiter::Concurrency(c) => Some(crate::leases::Leases::new(c.lease())),
                _ => None,
            },
        });
        reg.by_id.retain(|_, w| w.strong_count() > 0);
        reg.by_id.insert(id.to_owned(), Arc::downgrade(&limit));
        limit
    }

    /// Checks one limit for one key: the fast path.
    #[inline]
    pub fn check_one(&self, check: &Check<'_>) -> Result<Decision, CheckError> {
        check
            .limit
            .table
            .check(check.key, self.clock.now(), check.cost)
    }

    /// What [`check_one`](Self::check_one) would decide now, without
    /// charging anything: whether `check.cost` fits, and if not, when it
    /// will (the algorithm's own `retry_after`: a fixed window's reset, a
    /// log's oldest entry expiring, a bucket's refill). A cost beyond the
    /// limit's capacity is an error, as for a check.
    pub fn peek_one(&self, check: &Check<'_>) -> Result<Decision, CheckError> {
        let table = &check.limit.table;
        let guard = table.lock(table.shard_of(check.key));
        let now = self.clock.now();
        guard.peek(check.key, now, check.cost).map(|o| o.decision)
    }

    /// Checks one request against all its limits, all-or-nothing.
    ///
    /// An impossible cost under any limit is an error and changes nothing.
    pub fn check(&self, checks: &[Check<'_>]) -> Result<Checked, CheckError> {
        match checks {
            [] => Ok(Checked {
                allowed: true,
                decisions: Decisions::new(),
            }),
            [one] => {
                let decision = self.check_one(one)?;
                Ok(Checked {
                    allowed: decision.allowed,
                    decisions: smallvec::smallvec![decision],
                })
            }
            // Two checks on different shards (an IP guard and a key's
            // plan, say) cannot share a state, and need no lists.
            [a, b] => {
                let (sa, sb) = (slot(a), slot(b));
                if sa != sb {
                    return self.check_pair((a, sa), (b, sb));
                }
                self.check_group(checks)
            }
            many => self.check_group(many),
        }
    }

    /// [`check`](Self::check) of a group that may name one state twice.
    fn check_group(&self, checks: &[Check<'_>]) -> Result<Checked, CheckError> {
        match merge_duplicates(checks) {
            None => self.check_many(checks),
            Some((unique, index)) => {
                let merged = self.check(&unique)?;
                Ok(Checked {
                    allowed: merged.allowed,
                    decisions: index.iter().map(|i| merged.decisions[*i]).collect(),
                })
            }
        }
    }

    /// [`check_many`](Self::check_many) for two checks on different
    /// (limit, shard) slots: the same two locks in the same global order,
    /// the same peeks and commits, without the lists.
    fn check_pair(&self, a: Slotted<'_, '_>, b: Slotted<'_, '_>) -> Result<Checked, CheckError> {
        let (allowed, da, db) = self.pair(a, b)?;
        Ok(Checked {
            allowed,
            decisions: smallvec::smallvec![da, db],
        })
    }

    /// Two checks on different (limit, shard) slots decided together, all
    /// or nothing: whether the request is admitted, and each check's
    /// decision, in the order given.
    #[inline]
    pub(crate) fn pair(
        &self,
        (a, sa): Slotted<'_, '_>,
        (b, sb): Slotted<'_, '_>,
    ) -> Result<(bool, Decision, Decision), CheckError> {
        let swapped = sb < sa;
        let ((first, s1), (second, s2)) = if swapped {
            ((b, sb), (a, sa))
        } else {
            ((a, sa), (b, sb))
        };
        let (allowed, d1, d2) = match self.pair_shared((first, s1.1), (second, s2.1)) {
            Some(decided) => decided?,
            None => self.pair_exclusive((first, s1.1), (second, s2.1))?,
        };
        Ok(if swapped {
            (allowed, d2, d1)
        } else {
            (allowed, d1, d2)
        })
    }

    /// Two known keys on GCRA tables, under shared locks (see
    /// [`decide_pair_shared`](crate::atomic_table::decide_pair_shared)):
    /// `None` for other tables, or a key not held yet.
    #[inline]
    fn pair_shared(
        &self,
        (first, s1): (&Check<'_>, usize),
        (second, s2): (&Check<'_>, usize),
    ) -> Option<Result<(bool, Decision, Decision), CheckError>> {
        let (AnyTable::AtomicGcra(t1), AnyTable::AtomicGcra(t2)) =
            (&first.limit.table, &second.limit.table)
        else {
            return None;
        };
        crate::atomic_table::decide_pair_shared(
            (t1, s1, first.key, first.cost),
            (t2, s2, second.key, second.cost),
            self.clock.now(),
        )
    }

    /// Two checks in lock order, under both shards' exclusive locks.
    fn pair_exclusive(
        &self,
        (first, s1): (&Check<'_>, usize),
        (second, s2): (&Check<'_>, usize),
    ) -> Result<(bool, Decision, Decision), CheckError> {
        let mut g1 = first.limit.table.lock(s1);
        let mut g2 = second.limit.table.lock(s2);
        let now = self.clock.now();
        match (&mut g1, &mut g2) {
            // Two GCRA limits (an IP guard and a key's token bucket, say):
            // the same steps on the words themselves.
            (Guard::AtomicGcra(t1, m1), Guard::AtomicGcra(t2, m2)) => {
                crate::atomic_table::decide_pair(
                    (t1, m1, first.key, first.cost),
                    (t2, m2, second.key, second.cost),
                    now,
                )
            }
            _ => {
                let o1 = g1.peek(first.key, now, first.cost)?;
                let o2 = g2.peek(second.key, now, second.cost)?;
                let allowed = o1.decision.allowed && o2.decision.allowed;
                let d1 = settle(&mut g1, first, o1, allowed, now)?;
                let d2 = settle(&mut g2, second, o2, allowed, now)?;
                Ok((allowed, d1, d2))
            }
        }
    }

    fn check_many(&self, checks: &[Check<'_>]) -> Result<Checked, CheckError> {
        // Lock every (limit, shard) involved once, in one global order.
        let mut order: SmallVec<[((u64, usize), &Limit); 4]> =
            checks.iter().map(|c| (slot(c), c.limit)).collect();
        order.sort_unstable_by_key(|(s, _)| *s);
        order.dedup_by_key(|(s, _)| *s);
        let mut guards: SmallVec<[Guard<'_>; 4]> = order
            .iter()
            .map(|((_, shard), limit)| limit.table.lock(*shard))
            .collect();
        let now = self.clock.now();
        let guard_of = |c: &Check<'_>| {
            order
                .binary_search_by_key(&slot(c), |(s, _)| *s)
                .unwrap_or(0)
        };

        let mut outcomes: SmallVec<[_; 4]> = SmallVec::with_capacity(checks.len());
        for c in checks {
            outcomes.push(guards[guard_of(c)].peek(c.key, now, c.cost)?);
        }
        let allowed = outcomes.iter().all(|o| o.decision.allowed);
        let mut decisions = Decisions::with_capacity(checks.len());
        for (c, o) in checks.iter().zip(outcomes) {
            decisions.push(settle(&mut guards[guard_of(c)], c, o, allowed, now)?);
        }
        Ok(Checked { allowed, decisions })
    }

    /// How many limits are registered and alive (some handle to them is
    /// held).
    pub fn live_limits(&self) -> usize {
        self.limits
            .lock()
            .by_id
            .values()
            .filter(|w| w.strong_count() > 0)
            .count()
    }

    /// Drops every fully replenished key of every live limit. Returns how
    /// many.
    pub fn purge_expired(&self) -> usize {
        let limits: Vec<Arc<Limit>> = {
            let reg = self.limits.lock();
            reg.by_id.values().filter_map(Weak::upgrade).collect()
        };
        let now = self.clock.now();
        for l in &limits {
            self.end_all_leases(l, now);
        }
        limits.iter().map(|l| l.table.purge(now)).sum()
    }
}
