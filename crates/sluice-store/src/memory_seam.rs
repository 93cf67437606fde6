//! The memory store behind the [seam](crate::seam): a counter's slot is
//! its table of keys, and a group of checks is decided under the locks of
//! every shard it touches, reserves included, so each decision is exact.

use sluice_core::{Clock, Debited, Decision, Nanos};
use smallvec::SmallVec;

use crate::key::KeyId;
use crate::limit::{Guard, Limit};
use crate::memory::{Check as TableCheck, MemoryStore, settle, slot};
use crate::seam::{
    Check, Checked, Counter, CounterDef, Decisions, Pending, Slot, Store, StoreError,
};

impl<C: Clock + Send + Sync + 'static> Store for MemoryStore<C> {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn counter(&self, def: CounterDef) -> Counter {
        let limit = self.limit(def.id(), *def.limiter());
        Counter::new(def, Slot::new(limit))
    }

    fn fresh_counter(&self, def: CounterDef) -> Counter {
        let limit = self.fresh_limit(def.id(), *def.limiter());
        Counter::new(def, Slot::new(limit))
    }

    #[inline]
    fn check<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Pending::ready(self.decide_now(checks))
    }

    fn check_each<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Vec<Result<Checked, StoreError>>> {
        Pending::ready(
            checks
                .iter()
                .map(|c| self.decide_now(std::slice::from_ref(c)))
                .collect(),
        )
    }

    fn refund<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>> {
        Pending::ready(self.refund_now(checks))
    }

    fn debit<'a>(
        &'a self,
        counter: &'a Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Pending<'a, Result<Debited, StoreError>> {
        Pending::ready(self.debit_now(counter, key, amount, max_debt))
    }

    fn answers_at_once(&self) -> bool {
        true
    }

    #[inline(always)]
    fn check_one_now(&self, check: &Check<'_>) -> Option<Result<Decision, StoreError>> {
        Some(self.decide_one(check))
    }

    fn purge_idle(&self) -> usize {
        self.purge_expired()
    }
}

/// A check as the store's tables take it: its counter's table, key and
/// cost.
#[inline]
fn plain<'a>(check: &Check<'a>) -> Result<TableCheck<'a>, StoreError> {
    Ok(TableCheck {
        limit: table(check)?,
        key: check.key,
        cost: check.cost,
    })
}

/// The table a check's counter names in this store.
#[inline(always)]
fn table<'a>(check: &Check<'a>) -> Result<&'a Limit, StoreError> {
    check.counter.state::<Limit>()
}

impl<C: Clock> MemoryStore<C> {
    /// Decides one check (see [`Store::check_one_now`]).
    #[inline(always)]
    pub fn decide_one(&self, check: &Check<'_>) -> Result<Decision, StoreError> {
        let limit = table(check)?;
        if let Some(leases) = &limit.leases
            && (check.lease.is_some() || !leases.is_empty())
        {
            return Ok(self.decide_leased(std::slice::from_ref(check))?.single());
        }
        self.decide_one_plain(limit, check)
    }

    /// [`decide_one`](Self::decide_one) of a check that takes, renews or
    /// ends no lease, on its table `limit`.
    #[inline(always)]
    fn decide_one_plain(&self, limit: &Limit, check: &Check<'_>) -> Result<Decision, StoreError> {
        if check.reserve == 0 {
            return Ok(limit
                .table
                .check(check.key, self.clock().now(), check.cost)?);
        }
        Ok(self.decide_plain(std::slice::from_ref(check))?.single())
    }

    /// Decides a group of checks, all or nothing (see [`Store::check`]).
    #[inline]
    pub fn decide_now(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        if crate::memory_leases::leased(checks) {
            return self.decide_leased(checks);
        }
        self.decide_plain(checks)
    }

    /// [`decide_now`](Self::decide_now) of a group that takes, renews or
    /// ends no lease.
    #[inline]
    pub(crate) fn decide_plain(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        if let [one] = checks
            && one.reserve == 0
        {
            let d = self.decide_one_plain(table(one)?, one)?;
            return Ok(Checked::by_store(d.allowed, smallvec::smallvec![d]));
        }
        if let [a, b] = checks
            && a.reserve == 0
            && b.reserve == 0
        {
            // Two limits, the usual group: decided as a pair, its two
            // decisions placed once.
            let (a, b) = (plain(a)?, plain(b)?);
            let (sa, sb) = (slot(&a), slot(&b));
            if sa != sb {
                let (allowed, da, db) = self.pair((&a, sa), (&b, sb))?;
                return Ok(Checked::by_store(allowed, smallvec::smallvec![da, db]));
            }
        }
        let mut plain: SmallVec<[TableCheck<'_>; 4]> = SmallVec::with_capacity(checks.len());
        for c in checks {
            plain.push(self::plain(c)?);
        }
        if checks.iter().all(|c| c.reserve == 0) {
            let checked = self.check(&plain)?;
            return Ok(Checked::by_store(checked.allowed, checked.decisions));
        }
        let reserves: SmallVec<[u64; 4]> = checks.iter().map(|c| c.reserve).collect();
        self.decide_reserved(&plain, &reserves)
    }

    /// Gives back each check's cost, one after another (see
    /// [`Store::refund`]): each key under its shard's lock, then peeked.
    pub fn refund_now(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        if crate::memory_leases::leased(checks) {
            return self.refund_leased(checks);
        }
        self.refund_plain(checks)
    }

    /// [`refund_now`](Self::refund_now) of a group that releases or ends
    /// no lease.
    pub(crate) fn refund_plain(&self, checks: &[Check<'_>]) -> Result<Checked, StoreError> {
        let mut decisions: Decisions = SmallVec::with_capacity(checks.len());
        for c in checks {
            let limit = table(c)?;
            let mut guard = limit.table.lock(limit.table.shard_of(c.key));
            let now = self.clock().now();
            guard.refund(c.key, now, c.cost);
            decisions.push(guard.peek(c.key, now, 0)?.decision);
        }
        Ok(Checked::by_store(true, decisions))
    }

    /// Charges `amount` to a key, into debt up to `max_debt` (see
    /// [`Store::debit`]): under its shard's lock (the one key's word held),
    /// at the store's clock, as a refund is.
    pub fn debit_now(
        &self,
        counter: &Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Result<Debited, StoreError> {
        let limit = counter.state::<Limit>()?;
        let mut guard = limit.table.lock(limit.table.shard_of(key));
        let now = self.clock().now();
        Ok(guard.debit(key, now, amount, max_debt))
    }

    /// A group in which some checks keep a reserve: each must fit with its
    /// reserve left over, and its decision counts above the reserve. Two
    /// checks of one (limit, key) are merged: their costs summed, the
    /// larger reserve kept.
    fn decide_reserved(
        &self,
        checks: &[TableCheck<'_>],
        reserves: &[u64],
    ) -> Result<Checked, StoreError> {
        let mut locked = Locked::new(checks, self.clock().now());
        if let Some(refusal) = locked.refusal_for_reserve(checks, reserves)? {
            return Ok(refusal);
        }
        locked.charge(checks, reserves)
    }
}

/// The shards a group of checks touches, locked in one global order, and
/// the time the group is decided at.
struct Locked<'a> {
    order: SmallVec<[((u64, usize), &'a Limit); 4]>,
    guards: SmallVec<[Guard<'a>; 4]>,
    now: Nanos,
}

impl<'a> Locked<'a> {
    fn new(checks: &[TableCheck<'a>], clock_now: Nanos) -> Self {
        let mut order: SmallVec<[((u64, usize), &'a Limit); 4]> =
            checks.iter().map(|c| (slot(c), c.limit)).collect();
        order.sort_unstable_by_key(|(s, _)| *s);
        order.dedup_by_key(|(s, _)| *s);
        let guards: SmallVec<[Guard<'a>; 4]> = order
            .iter()
            .map(|((_, shard), limit)| limit.table.lock(*shard))
            .collect();
        Self {
            order,
            guards,
            now: clock_now,
        }
    }

    /// The guard of a check's shard.
    fn of(&self, c: &TableCheck<'_>) -> usize {
        self.order
            .binary_search_by_key(&slot(c), |(s, _)| *s)
            .unwrap_or(0)
    }

    /// A check that does not fit with its reserve on top refuses the
    /// request, which is charged nothing; its wait is what its algorithm
    /// says for the cost with the reserve. `None` when every reserve fits.
    fn refusal_for_reserve(
        &self,
        checks: &[TableCheck<'_>],
        reserves: &[u64],
    ) -> Result<Option<Checked>, StoreError> {
        for (i, c) in checks.iter().enumerate() {
            let (cost, reserve) = asked(checks, reserves, i);
            if reserve == 0 {
                continue;
            }
            let probe =
                self.guards[self.of(c)].peek(c.key, self.now, cost.saturating_add(reserve))?;
            if probe.decision.allowed {
                continue;
            }
            // Every check says whether it would have admitted its own cost
            // (with its reserve), from its state unchanged.
            let mut decisions: Decisions = SmallVec::with_capacity(checks.len());
            for (j, other) in checks.iter().enumerate() {
                let guard = &self.guards[self.of(other)];
                let (cost, reserve) = asked(checks, reserves, j);
                let stands = guard.peek(other.key, self.now, 0)?;
                let fits = guard.peek(other.key, self.now, cost.saturating_add(reserve))?;
                let mut d = above(stands.decision, reserve);
                if !fits.decision.allowed {
                    d.allowed = false;
                    d.retry_after = Some(fits.decision.retry_after.unwrap_or(1).max(1));
                }
                decisions.push(d);
            }
            decisions[i].allowed = false;
            decisions[i].retry_after = Some(probe.decision.retry_after.unwrap_or(1).max(1));
            return Ok(Some(Checked::by_store(false, decisions)));
        }
        Ok(None)
    }

    /// Charges the costs, all or nothing, once per distinct (limit, key);
    /// the decisions count above the reserves.
    fn charge(
        &mut self,
        checks: &[TableCheck<'_>],
        reserves: &[u64],
    ) -> Result<Checked, StoreError> {
        let first = |i: usize| checks[..i].iter().position(|c| same(c, &checks[i]));
        let mut outcomes = SmallVec::<[_; 4]>::with_capacity(checks.len());
        for (i, c) in checks.iter().enumerate() {
            let outcome = match first(i) {
                Some(_) => None,
                None => {
                    let cost = asked(checks, reserves, i).0;
                    Some(self.guards[self.of(c)].peek(c.key, self.now, cost)?)
                }
            };
            outcomes.push(outcome);
        }
        let allowed = outcomes.iter().flatten().all(|o| o.decision.allowed);
        let mut decisions: Decisions = SmallVec::with_capacity(checks.len());
        for (i, c) in checks.iter().enumerate() {
            let d = match (first(i), outcomes[i].take()) {
                (None, Some(o)) => {
                    let g = self.of(c);
                    settle(&mut self.guards[g], c, o, allowed, self.now)?
                }
                (Some(j), _) => decisions[j],
                (None, None) => Decision::full(0),
            };
            decisions.push(d);
        }
        let out = decisions
            .into_iter()
            .enumerate()
            .map(|(i, d)| above(d, asked(checks, reserves, i).1))
            .collect();
        Ok(Checked::by_store(allowed, out))
    }
}

/// Whether two checks name the same state.
fn same(a: &TableCheck<'_>, b: &TableCheck<'_>) -> bool {
    std::ptr::eq(a.limit, b.limit) && a.key == b.key
}

/// The cost and reserve asked of the `i`-th check's (limit, key): every
/// check of it summed, the largest reserve.
fn asked(checks: &[TableCheck<'_>], reserves: &[u64], i: usize) -> (u64, u64) {
    let mut cost = 0u64;
    let mut reserve = 0u64;
    for (c, r) in checks.iter().zip(reserves) {
        if same(c, &checks[i]) {
            cost = cost.saturating_add(c.cost);
            reserve = reserve.max(*r);
        }
    }
    (cost, reserve)
}

/// A decision as counted above a reserve.
fn above(d: Decision, reserve: u64) -> Decision {
    Decision {
        remaining: d.remaining.saturating_sub(reserve),
        ..d
    }
}
