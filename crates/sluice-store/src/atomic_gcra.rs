//! GCRA on one atomic word: the lock-free path of [`DirectLimiter`], of
//! [`KeyedLimiter`]'s GCRA-equivalent limits and of the memory store's
//! atomic table. The word is any [`AtomicWord`]: `std`'s `AtomicU64`, or
//! under `cfg(shuttle)` also the atomic table's shuttle one (`crate::sync`).
//!
//! [`DirectLimiter`]: crate::DirectLimiter
//! [`KeyedLimiter`]: crate::KeyedLimiter

use std::sync::atomic::Ordering;

use sluice_core::{AlgorithmKind, CheckError, Decision, Gcra, LimitSpec, Nanos};

use crate::sync::AtomicWord;

/// The bit of a TAT word that marks it held by a pair's decision in the
/// memory store's atomic table (see `atomic_table`): a TAT never has it
/// (`for_gcra` keeps a TAT below 2^63 until 2189, and a debt stops short
/// of it: `TatMap::debit`).
pub(crate) const HELD: u64 = 1 << 63;

/// GCRA on one atomic TAT in nanoseconds (a scale of 1): the same
/// decisions as [`Gcra::check_nanos`], with the admission decided in the
/// compare-and-swap loop and the rest of the [`Decision`] computed once, after
/// it (so that a caller that reads only `allowed` never pays for it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AtomicGcra {
    gcra: Gcra,
    burst: u64,
    /// The emission interval in nanoseconds.
    interval: u64,
    /// `burst * interval`: how far ahead of now the TAT may run.
    cap: u64,
}

impl AtomicGcra {
    /// The atomic form of a limit, where it has one: GCRA, or an algorithm
    /// that makes exactly GCRA's decisions (the token bucket, the leaky
    /// bucket with `nodelay`), whose emission interval is a whole number of
    /// nanoseconds (a scale of 1) and whose TAT stays below [`HELD`] until
    /// the year 2189 at least (a tolerance below 2^61 ns, 73 years).
    pub(crate) fn for_spec(spec: &LimitSpec) -> Option<Self> {
        let gcra_equivalent = match spec.algorithm {
            AlgorithmKind::Gcra | AlgorithmKind::TokenBucket => true,
            AlgorithmKind::LeakyBucket => spec.nodelay,
            _ => false,
        };
        let gcra = Gcra::new(spec.rate, spec.burst).ok()?;
        if !gcra_equivalent {
            return None;
        }
        Self::for_gcra(&gcra)
    }

    /// The atomic form of a GCRA limit, where it has one: an emission
    /// interval of a whole number of nanoseconds and a tolerance below 2^61
    /// (see [`for_spec`](Self::for_spec)).
    pub(crate) fn for_gcra(gcra: &Gcra) -> Option<Self> {
        (gcra.scale() == 1 && gcra.tolerance() < 1 << 61).then(|| Self::new(gcra))
    }

    /// The algorithm this is the atomic form of.
    pub(crate) fn gcra(&self) -> &Gcra {
        &self.gcra
    }

    /// A check of a key not seen before: its decision, and the TAT to store
    /// if admitted.
    pub(crate) fn check_fresh(
        &self,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, Option<Nanos>), CheckError> {
        self.gcra.check_nanos(0, now, cost)
    }

    fn new(gcra: &Gcra) -> Self {
        let cap = u64::try_from(gcra.tolerance()).unwrap_or(u64::MAX);
        let burst = sluice_core::Algorithm::capacity(gcra);
        Self {
            gcra: *gcra,
            burst,
            interval: cap / burst.max(1),
            cap,
        }
    }

    /// Decides a request of `cost` at `now` and commits it to `tat` if
    /// admitted; when another check moves `tat` first, decides again from
    /// its value.
    #[inline(always)]
    pub(crate) fn check<W: AtomicWord>(
        &self,
        tat: &W,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        self.commit(tat, now, cost).map(|r| self.decision(r))
    }

    /// The admission and commit alone: what must happen while the entry is
    /// held. [`decision`](Self::decision) computes the rest afterwards.
    ///
    /// It decides at `now` as given: a `now` earlier than the time that
    /// committed the TAT it reads (another thread's clock a little ahead)
    /// decides from the TAT, which only refuses more. A refusal writes
    /// nothing. A word held by a pair's decision ([`HELD`]) is waited for.
    #[inline(always)]
    pub(crate) fn commit<W: AtomicWord>(
        &self,
        tat: &W,
        now: Nanos,
        cost: u64,
    ) -> Result<Raw, CheckError> {
        let increment = self.increment(cost)?;
        let mut current = tat.load(Ordering::Acquire);
        let backoff = crossbeam_utils::Backoff::new();
        loop {
            if current & HELD != 0 {
                crate::sync::spin(&backoff);
                current = tat.load(Ordering::Acquire);
                continue;
            }
            let raw = self.turn(current, now, increment);
            if !raw.allowed || cost == 0 {
                return Ok(raw);
            }
            match tat.compare_exchange_weak(
                current,
                now + raw.ahead,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return Ok(raw),
                Err(actual) => current = actual,
            }
        }
    }

    /// The admission of `cost` at `now` on a TAT of `current` (0 for a key
    /// not held) that no one else can move (under an exclusive lock):
    /// [`commit`](Self::commit)'s decision, with nothing committed. An
    /// admitted request's TAT is then [`Raw::tat`].
    #[inline(always)]
    pub(crate) fn decide(&self, current: Nanos, now: Nanos, cost: u64) -> Result<Raw, CheckError> {
        Ok(self.turn(current, now, self.increment(cost)?))
    }

    /// How far `cost` moves the TAT; a cost beyond the burst is an error.
    #[inline(always)]
    fn increment(&self, cost: u64) -> Result<u64, CheckError> {
        if cost > self.burst {
            return Err(CheckError::CostExceedsCapacity {
                cost,
                capacity: self.burst,
            });
        }
        // cost <= burst, so cost * interval <= cap: no overflow.
        Ok(cost * self.interval)
    }

    /// One turn of the decision: admitted if the TAT moved by `increment`
    /// stays within `cap` of now.
    #[inline(always)]
    fn turn(&self, current: Nanos, now: Nanos, increment: u64) -> Raw {
        let base = current.max(now);
        let ahead = base.saturating_add(increment) - now;
        if ahead > self.cap {
            Raw {
                allowed: false,
                used: base - now,
                ahead,
            }
        } else {
            Raw {
                allowed: true,
                used: 0,
                ahead,
            }
        }
    }

    /// The full decision for a [`commit`](Self::commit)'s result.
    #[inline(always)]
    pub(crate) fn decision(&self, r: Raw) -> Decision {
        if r.allowed {
            Decision {
                allowed: true,
                limit: self.burst,
                remaining: (self.cap - r.ahead) / self.interval,
                reset_after: r.ahead,
                retry_after: None,
                delay: 0,
            }
        } else {
            Decision {
                allowed: false,
                limit: self.burst,
                remaining: self.cap.saturating_sub(r.used) / self.interval,
                reset_after: r.used,
                retry_after: Some(r.ahead - self.cap),
                delay: 0,
            }
        }
    }
}

/// What [`AtomicGcra::commit`] found: enough to build the [`Decision`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Raw {
    allowed: bool,
    /// For a refusal: how far the TAT is ahead of now.
    used: Nanos,
    /// How far the TAT would be (or is, once admitted) ahead of now.
    ahead: Nanos,
}

impl Raw {
    /// Whether the request was admitted.
    #[inline(always)]
    pub(crate) fn allowed(&self) -> bool {
        self.allowed
    }

    /// The TAT of an admitted request decided at `now`.
    #[inline(always)]
    pub(crate) fn tat(&self, now: Nanos) -> Nanos {
        now + self.ahead
    }
}
