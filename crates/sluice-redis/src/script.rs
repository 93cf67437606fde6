//! The decision script (`lua/decide.lua`): the parameters it takes per
//! limit, how one call is encoded, and how its reply is read.
//!
//! One call decides G independent groups; each group is N checks decided
//! all-or-nothing. The time is Redis's own `TIME` (microseconds).
//!
//! # Reserves
//!
//! Each limit passed to the script carries a *reserve*
//! ([`LimitParams::with_reserve`]): the cost that must still be left in the
//! limit after the charge. A check is admitted only if its cost plus the
//! reserve fits, as if the burst were `burst - reserve`, and its
//! `remaining` and `retry_after` are those of that smaller burst. The state
//! in Redis does not depend on the reserve, so the same key can be decided
//! with different reserves, atomically with the charge. For the token
//! bucket and GCRA it does not depend on the burst either (only on the
//! rate), which is why delay limits, which decide one key with two bursts,
//! take only those two algorithms. Uses:
//!
//! - priority classes (`max_share`): a class may not take the limit below
//!   the part reserved for the others, exactly, across every instance;
//! - delay limits (`on_limit = "delay"`) count on an extended bucket
//!   (`burst + extra`); with a reserve of `extra`, the same key is decided
//!   as the plain bucket (what fits the burst now), when the instance's
//!   delay queue is full.
//!
//! # Debt
//!
//! The script's debit mode applies exactly sluice-core's
//! [`Limiter::debit`] (a cost charged whatever is left, into debt up to
//! `max_debt`), and every mode decides a key in debt as sluice-core does
//! (refused, paid off at the rate, carried across windows, refunded
//! first, kept until paid off). Each limit's parameters carry whether its
//! debt is forgiven at the window reset ([`Limiter::debt_forgiven`]). A
//! call in debit mode takes its checks' costs as the amounts, and
//! `max_debt` after them; it answers, per check, the cost charged. The
//! sliding log keeps its debt in the first element of its list while it has
//! some (see `lua/decide.lua`); it takes debits only when its window is a
//! whole number of microseconds ([`LimitParams::can_debit`]), as every
//! common limit's is (`10/s` with any burst, `100/min`, `5/h`).
//!
//! # Concurrency (slots as leases)
//!
//! A concurrency limit ([`Limiter::Concurrency`]) is algorithm 7: its
//! key's state is one string of packed `<ddd` triples, one per holder of
//! slots (holder id, slots held, expiry in µs on Redis's clock): a Sluice
//! instance (ids below 2^52), whose slots come back one lease after it last
//! took or renewed them, or a check's own lease
//! ([`LeaseId`](sluice_store::seam::LeaseId), at least 2^52), which comes
//! back one lease after it was taken or renewed. Its fields: `B` the most
//! in flight, `R` the reserve, `L` the lease in whole µs (rounded up), `P`
//! and `g` the lease as (µs, ns) for the durations answered, `L2` the
//! holder (the check's lease, else the calling store's instance id, which
//! [`DecisionScript`] sets per call, so the parameters stay the store's
//! own), `M = M2 = a = 1`. A peek (cost 0) by a holder of slots renews its
//! lease. A refund (a release) by a lease takes the cost off that lease's
//! entry only; one by an instance takes it off the caller's entry first,
//! then what the caller does not hold off the other live entries, the one
//! whose lease ends soonest first, none below 0. See `lua/decide.lua` for
//! the rules, docs/redis.md for their use.
//!
//! # Exact arithmetic in Lua
//!
//! Lua numbers are doubles, exact for integers below 2^53. The script keeps
//! sluice-core's arithmetic exact by three choices:
//!
//! - **Units of g/a ns.** With the rate reduced to `a` per `p` ns and
//!   `g = gcd(1000·a, p)`, a microsecond is `M = 1000·a/g` units and a unit
//!   of cost `P = p/g` units. Every time the script sees is a whole
//!   microsecond, so every scaled quantity of sluice-core (multiples of
//!   `1000·a` and `p`) is a whole number of these units: the same integers
//!   divided by `g` (up to 1000 times smaller).
//! - **Times relative to a stored microsecond.** Absolute times are whole
//!   microseconds (about 2^51 today); state holds quantities relative to them
//!   (a bucket's level as of its last update, a GCRA's TAT as `last + level`),
//!   never nanoseconds since the epoch (2^61).
//! - **Durations as (µs, ns) pairs**, added up in Rust.
//!
//! # Domain and tolerance
//!
//! The results equal sluice-core's exactly, field by field, while every
//! intermediate stays below 2^52, which [`LimitParams::is_exact`] checks:
//!
//! - `1000·a` (the reduced rate's amount), and twice the capacity `B·P`:
//!   for a rate whose emission interval is a whole number of microseconds
//!   (10/s, 100/min, 1000/day: `P` is that interval in µs) the window
//!   `B/rate` may last up to 2^51 µs, 71 years; in general up to
//!   `2^51 · g / (1000·a)` µs;
//! - for the window counters, windows of at least a microsecond (the
//!   resolution of Redis's clock) and an alignment period `L2·M2` below
//!   2^52;
//! - for the sliding window counter also `2·B·(B·P)`: a burst of 10,000
//!   per day is fine, a burst of a million per day is not.
//!
//! Outside that domain the script still answers, each operation rounded to
//! a double (relative error 2^-53): a decision can differ from
//! sluice-core's only for a request within that relative distance of a
//! boundary, and durations are off by a few parts in 10^16 of their length;
//! sub-microsecond windows, finer than Redis's clock, lose their alignment.
//! Limits like these (bursts near 2^52 units) are far beyond what a shared
//! store is for; the conformance tests cover the exact domain.
//!
//! Debt stays exact while the state it makes does too: a window count is
//! at most 2^32 - 1 (as in sluice-core); a bucket's level or a GCRA's TAT
//! (in units ahead of now), a window count times the window's length `L`,
//! and the time until a debt is paid off, all below 2^52 units.
//! Amounts above 2^52 are sent as 2^52 ([`MAX_AMOUNT`]): the excess then
//! counts the rest. Beyond that (a debt of more than a hundred years),
//! each operation is rounded to a double, like the limits above.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use redis::aio::ConnectionLike;
use sluice_core::{Decision, Limiter};

use crate::RedisStoreError;

mod reply;
use reply::parse_reply;

/// The script's source.
pub(crate) const SOURCE: &str = include_str!("../lua/decide.lua");

/// Intermediates below this are exact in a double with room for one carry.
const EXACT: u128 = 1 << 52;

/// The largest cost a refund or a debit sends: exact in a double, and
/// above anything a state in the exact domain holds.
pub(crate) const MAX_AMOUNT: u64 = 1 << 52;

/// What the script does with the groups it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Decide and commit each group all-or-nothing.
    Check,
    /// Decide without committing anything, reporting each check as part of
    /// a refused request (its refusal, or a peek where it would pass).
    DryRun,
    /// Give back the costs of groups committed earlier; answers the state
    /// as it then stands (peeks).
    Refund,
    /// Charge each check's cost whatever is left, into debt up to a
    /// `max_debt` ([`DecisionScript::debit`]).
    Debit,
}

/// One limit's parameters as the script takes them (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct LimitParams {
    alg: u8,
    burst: u64,
    p: u64,
    m: u64,
    g: u64,
    a: u64,
    l: u64,
    l2: u64,
    m2: u64,
    queue: bool,
    /// The cost that must be left after a charge (see the module docs).
    reserve: u64,
    /// Whether debt is forgiven at the window reset.
    forgive: bool,
    /// A concurrency limit's lease the check's slots are held under (see
    /// [`LeaseId`](sluice_store::seam::LeaseId)); 0: the calling instance.
    holder: u64,
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The reduced rate `(a, p)` of any limiter: `a` units of cost per `p` ns.
fn reduced_rate(limiter: &Limiter) -> Option<(u64, u64)> {
    let (a, p) = limiter.reduced_rate();
    (a > 0 && p > 0).then_some((a, p))
}

impl LimitParams {
    /// The parameters of `limiter`, or `None` if they cannot be read (a
    /// rate or capacity whose scaled quantities overflow 64 bits). The one
    /// place they are computed: a store computes them once per limit,
    /// when the limit is registered, and reads them back per request.
    pub(crate) fn compute(limiter: &Limiter) -> Option<Self> {
        let (a, p) = reduced_rate(limiter)?;
        let burst = limiter.capacity();
        let (alg, queue) = match limiter {
            Limiter::FixedWindow(_) => (1, false),
            Limiter::SlidingLog(_) => (2, false),
            Limiter::SlidingWindow(_) => (3, false),
            Limiter::TokenBucket(_) => (4, false),
            Limiter::LeakyBucket(l) => (5, !l.nodelay()),
            Limiter::Gcra(_) => (6, false),
            Limiter::Concurrency(c) => return Some(Self::slots(c, limiter)),
        };
        let us = 1000 * u128::from(a);
        let g = gcd(us, u128::from(p));
        let m = us / g;
        let pp = u128::from(p) / g;
        let l = u128::from(burst) * pp;
        let g2 = gcd(m, l);
        Some(Self {
            alg,
            burst,
            p: u64::try_from(pp).ok()?,
            m: u64::try_from(m).ok()?,
            g: u64::try_from(g).ok()?,
            a,
            l: u64::try_from(l).ok()?,
            l2: u64::try_from(l / g2).ok()?,
            m2: u64::try_from(m / g2).ok()?,
            queue,
            reserve: 0,
            forgive: limiter.debt_forgiven(),
            holder: 0,
        })
    }

    /// A concurrency limit's parameters (see the module docs); its
    /// instance id (`l2`) is set per call.
    fn slots(c: &sluice_core::Concurrency, limiter: &Limiter) -> Self {
        let lease = c.lease();
        Self {
            alg: 7,
            burst: limiter.capacity(),
            p: lease / 1000,
            m: 1,
            g: lease % 1000,
            a: 1,
            l: lease.div_ceil(1000),
            l2: 0,
            m2: 1,
            queue: false,
            reserve: 0,
            forgive: limiter.debt_forgiven(),
            holder: 0,
        }
    }

    /// These parameters with a reserve: the cost that must still be left
    /// after a charge (capped at the burst). See the module docs.
    pub(crate) fn with_reserve(self, reserve: u64) -> Self {
        Self {
            reserve: reserve.min(self.burst),
            ..self
        }
    }

    /// These parameters for slots held under `lease` (a concurrency
    /// limit's; ignored by the others).
    pub(crate) fn with_lease(self, lease: Option<sluice_store::seam::LeaseId>) -> Self {
        Self {
            holder: lease.map_or(0, |l| l.get()),
            ..self
        }
    }

    /// The limit's capacity (burst).
    pub(crate) fn burst(&self) -> u64 {
        self.burst
    }

    /// The reserve (see [`with_reserve`](Self::with_reserve)).
    pub(crate) fn reserve(&self) -> u64 {
        self.reserve
    }

    /// Whether the script decides this limit exactly as sluice-core does
    /// (see the module docs).
    pub(crate) fn is_exact(&self) -> bool {
        let l = u128::from(self.l);
        let mut ok = 1000 * u128::from(self.a) < EXACT && 2 * l < EXACT;
        if matches!(self.alg, 1..=3) {
            ok &= u128::from(self.l2) * u128::from(self.m2) < EXACT;
            ok &= u128::from(self.m) <= l;
        }
        if self.alg == 3 {
            ok &= 2 * u128::from(self.burst) * l < EXACT;
        }
        if self.alg == 7 {
            ok &= u128::from(self.burst) < EXACT;
        }
        ok
    }

    /// Whether the script can debit this limit: any but a sliding log
    /// whose window is not a whole number of microseconds (its entries are
    /// logged again, a window later, as its debt is paid off).
    pub(crate) fn can_debit(&self) -> bool {
        self.alg != 2 || self.l.is_multiple_of(self.m)
    }

    /// The script's fields, for a call by the store `instance` (the id a
    /// concurrency limit's `L2` carries, unless the check names a lease).
    fn fields(&self, instance: u64) -> [u64; 12] {
        let l2 = match (self.alg, self.holder) {
            (7, 0) => instance,
            (7, lease) => lease,
            _ => self.l2,
        };
        [
            u64::from(self.alg),
            self.burst,
            self.p,
            self.m,
            self.g,
            self.a,
            self.l,
            l2,
            self.m2,
            u64::from(self.queue),
            self.reserve,
            u64::from(self.forgive),
        ]
    }
}

/// One check in a group: the Redis key, the limit and the cost.
#[derive(Debug, Clone)]
pub(crate) struct ScriptCheck {
    /// The Redis key holding the state.
    pub(crate) key: String,
    /// The limit.
    pub(crate) params: LimitParams,
    /// The cost.
    pub(crate) cost: u64,
}

/// The answer for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GroupReply {
    /// Whether every check passed (and the group was committed).
    pub(crate) allowed: bool,
    /// One decision per check, in order.
    pub(crate) decisions: Vec<Decision>,
}

/// Instance ids are below this: exact in a double.
const INSTANCE_IDS: u64 = 1 << 52;

/// A fresh random instance id, below 2^52.
fn random_instance_id() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    // Each RandomState has keys of its own (random per process, then
    // incremented); the time and the process tell processes apart anyway.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    RandomState::new().hash_one((nanos, std::process::id())) % INSTANCE_IDS
}

/// The loaded script (EVALSHA, reloaded on `NOSCRIPT`), with the instance
/// id its store's concurrency slots are held under.
#[derive(Debug, Clone)]
pub(crate) struct DecisionScript {
    script: redis::Script,
    instance: u64,
}

impl Default for DecisionScript {
    /// The script, with a fresh random instance id.
    fn default() -> Self {
        Self {
            script: redis::Script::new(SOURCE),
            instance: random_instance_id(),
        }
    }
}

impl DecisionScript {
    /// The id under which this script's calls hold concurrency slots.
    pub(crate) fn instance(&self) -> u64 {
        self.instance
    }

    /// Runs `groups` in one call. `now_us` overrides Redis's clock (tests).
    pub(crate) async fn run<C: ConnectionLike>(
        &self,
        conn: &mut C,
        mode: Mode,
        groups: &[&[ScriptCheck]],
        now_us: Option<u64>,
    ) -> Result<Vec<GroupReply>, RedisStoreError> {
        let inv = self.invocation(mode, groups, now_us)?;
        let reply: Vec<i64> = inv.invoke_async(conn).await?;
        parse_reply(&reply, groups)
    }

    /// Debits each of `checks` its cost (at most [`MAX_AMOUNT`]), into
    /// debt up to `max_debt`, in one call; answers the cost charged to
    /// each, in order. `now_us` overrides Redis's clock (tests).
    pub(crate) async fn debit<C: ConnectionLike>(
        &self,
        conn: &mut C,
        checks: &[ScriptCheck],
        max_debt: u64,
        now_us: Option<u64>,
    ) -> Result<Vec<u64>, RedisStoreError> {
        let mut inv = self.invocation(Mode::Debit, &[checks], now_us)?;
        inv.arg(max_debt);
        let reply: Vec<i64> = inv.invoke_async(conn).await?;
        if reply.len() != checks.len() {
            return Err(bad("a debit's reply has the wrong length"));
        }
        reply
            .into_iter()
            .zip(checks)
            .map(|(charged, c)| match u64::try_from(charged) {
                Ok(charged) if charged <= c.cost => Ok(charged),
                _ => Err(bad("a debit charged what it was not asked")),
            })
            .collect()
    }

    /// The call for `groups` in `mode`, every argument but a debit's
    /// `max_debt`.
    fn invocation(
        &self,
        mode: Mode,
        groups: &[&[ScriptCheck]],
        now_us: Option<u64>,
    ) -> Result<redis::ScriptInvocation<'_>, RedisStoreError> {
        let mut inv = self.script.prepare_invoke();
        inv.arg(match mode {
            Mode::Check => "c",
            Mode::Refund => "r",
            Mode::DryRun => "d",
            Mode::Debit => "b",
        });
        match now_us {
            Some(t) => inv.arg(t),
            None => inv.arg(""),
        };
        // The distinct limits and the distinct keys; per check, its
        // limit's and its key's index (1-based).
        let mut limits: Vec<LimitParams> = Vec::new();
        let mut keys: HashMap<&str, u16, foldhash::fast::RandomState> = HashMap::default();
        let mut refs: Vec<(u16, u16)> = Vec::new();
        for check in groups.iter().flat_map(|g| g.iter()) {
            let limit = match limits.iter().position(|l| *l == check.params) {
                Some(i) => i,
                None => {
                    limits.push(check.params);
                    limits.len() - 1
                }
            };
            let limit =
                u16::try_from(limit + 1).map_err(|_| bad("more than 65535 limits in one call"))?;
            let distinct = keys.len();
            let key = match keys.entry(check.key.as_str()) {
                Entry::Occupied(e) => *e.get(),
                Entry::Vacant(e) => {
                    let index = u16::try_from(distinct + 1)
                        .map_err(|_| bad("more than 65535 keys in one call"))?;
                    inv.key(&check.key);
                    *e.insert(index)
                }
            };
            refs.push((limit, key));
        }
        // Per limit its 12 fields, each a little-endian f64 (the script's
        // numbers are doubles; no decimal text to parse).
        let mut fields = Vec::with_capacity(96 * limits.len());
        for l in &limits {
            for f in l.fields(self.instance) {
                fields.extend_from_slice(&(f as f64).to_le_bytes());
            }
        }
        inv.arg(fields);
        // Per check 13 bytes: opens a group (u8), limit (u16), key (u16),
        // cost (f64), little-endian; one argument instead of four per check.
        let mut packed = Vec::with_capacity(13 * refs.len());
        let mut refs = refs.into_iter();
        for group in groups {
            for (i, check) in group.iter().enumerate() {
                let (limit, key) = refs.next().unwrap_or((1, 1));
                packed.push(u8::from(i == 0));
                packed.extend_from_slice(&limit.to_le_bytes());
                packed.extend_from_slice(&key.to_le_bytes());
                // Exact: costs are at most the burst, below 2^53 in the
                // exact domain; refunds and debits at most MAX_AMOUNT.
                let cost = check.cost.min(MAX_AMOUNT);
                packed.extend_from_slice(&(cost as f64).to_le_bytes());
            }
        }
        inv.arg(packed);
        Ok(inv)
    }
}

fn bad(what: &str) -> RedisStoreError {
    RedisStoreError::BadReply(what.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};

    fn limiter(algorithm: AlgorithmKind, rate: Rate, burst: u64) -> Limiter {
        LimitSpec {
            algorithm,
            rate,
            burst,
            nodelay: false,
        }
        .build()
        .unwrap()
    }

    #[test]
    fn reads_the_reduced_rate_of_every_algorithm() {
        let rate = Rate::new(7, 250_000_000).unwrap();
        for kind in AlgorithmKind::ALL {
            let l = limiter(kind, rate, 5);
            assert_eq!(reduced_rate(&l), Some((7, 250_000_000)), "{kind:?}");
            let p = LimitParams::compute(&l).unwrap();
            // g = gcd(7000, 250_000_000) = 1000
            assert_eq!((p.g, p.m, p.p, p.l), (1000, 7, 250_000, 1_250_000));
            assert!(p.is_exact());
        }
        let tb = limiter(AlgorithmKind::TokenBucket, Rate::per_second(10), 20);
        assert_eq!(reduced_rate(&tb), Some((1, 100_000_000)));
    }

    #[test]
    fn limits_whose_units_overflow_have_no_params() {
        // 2^60 a nanosecond: a microsecond is 1000 · 2^60 units.
        let fast = Rate::new(1 << 60, 1).unwrap();
        for kind in AlgorithmKind::ALL {
            let l = limiter(kind, fast, 1);
            assert_eq!(LimitParams::compute(&l), None, "{kind:?}");
        }
    }

    #[test]
    fn huge_limits_are_flagged_inexact() {
        let l = limiter(
            AlgorithmKind::TokenBucket,
            Rate::new(1, 1).unwrap(),
            u64::MAX / 4,
        );
        assert!(!LimitParams::compute(&l).unwrap().is_exact());
    }
}
