//! Concurrency: at most `max` units of cost **in flight** per key, whatever
//! the rate. A request takes its cost (usually 1, a slot) when it is
//! admitted and gives it back with [`refund`](Algorithm::refund) when it
//! ends; nothing comes back with time.
//!
//! - `remaining`: the slots free after this request.
//! - `reset_after`: 0 while no slot is held; else the lease (the longest a
//!   slot lives unreleased where a store keeps leases).
//! - `retry_after`: slots free when requests end, which no clock says, so
//!   a refusal answers [`RETRY_HINT`] (at most the lease).
//! - [`idle_at`](Algorithm::idle_at): now while no slot is held (a store may
//!   forget the key); never while one is (a store must not).
//!
//! The rate a [`LimitSpec`](crate::LimitSpec) gives it is `max` per lease:
//! its window (`burst / rate`) is the lease. Leases themselves (a slot
//! that an instance that died, or a release that never came, left behind
//! comes back after one) are kept by the stores, beside this count.
//!
//! ```
//! use sluice_core::{Algorithm, Concurrency};
//! let two = Concurrency::new(2, 30_000_000_000).unwrap();
//! let mut slots = Default::default();
//! assert!(two.check_and_apply(&mut slots, 0, 1).unwrap().allowed);
//! assert!(two.check_and_apply(&mut slots, 0, 1).unwrap().allowed);
//! assert!(!two.check_and_apply(&mut slots, 0, 1).unwrap().allowed);
//! two.refund(&mut slots, 5, 1); // a request ended
//! assert!(two.check_and_apply(&mut slots, 5, 1).unwrap().allowed);
//! ```

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};

/// What a refusal answers as its `retry_after` (at most the lease): one
/// second.
pub const RETRY_HINT: Nanos = 1_000_000_000;

/// At most `max` in flight per key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    max: u64,
    lease: Nanos,
    /// `max` per lease, reduced: `a` per `p` nanoseconds.
    rate: (u64, u64),
}

/// The cost in flight.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ConcurrencyState {
    /// Slots (units of cost) held now.
    pub held: u64,
}

impl Concurrency {
    /// At most `max` (at least 1) in flight, with leases of `lease`
    /// nanoseconds (at least 1).
    pub fn new(max: u64, lease: Nanos) -> Result<Self, LimitError> {
        if max == 0 {
            return Err(LimitError::ZeroBurst);
        }
        let lease = lease.max(1);
        let rate = crate::Rate::new(max, lease).map_or((max, lease), |r| r.reduced());
        Ok(Self { max, lease, rate })
    }

    /// The slots of a [`LimitSpec`](crate::LimitSpec): `burst` in flight,
    /// with the spec's window (`burst / rate`) as the lease.
    pub fn from_rate(rate: crate::Rate, burst: u64) -> Result<Self, LimitError> {
        let spec = crate::LimitSpec {
            algorithm: crate::AlgorithmKind::Concurrency,
            rate,
            burst,
            nodelay: false,
        };
        Self::new(burst, spec.window())
    }

    /// `max` per lease, reduced to lowest terms (see
    /// [`Limiter::reduced_rate`](crate::Limiter::reduced_rate)).
    pub fn reduced_rate(&self) -> (u64, u64) {
        self.rate
    }

    /// The lease, in nanoseconds.
    pub fn lease(&self) -> Nanos {
        self.lease
    }

    fn reset(&self, held: u64) -> Nanos {
        if held == 0 { 0 } else { self.lease }
    }
}

impl Algorithm for Concurrency {
    type State = ConcurrencyState;
    type Update = ConcurrencyState;

    fn capacity(&self) -> u64 {
        self.max
    }

    fn check(
        &self,
        state: &ConcurrencyState,
        _now: Nanos,
        cost: u64,
    ) -> Result<Outcome<ConcurrencyState>, CheckError> {
        ensure_possible(cost, self.max)?;
        let held = state.held;
        if held.saturating_add(cost) <= self.max {
            let after = held + cost;
            return Ok(Outcome {
                decision: Decision {
                    allowed: true,
                    limit: self.max,
                    remaining: self.max - after,
                    reset_after: self.reset(after),
                    retry_after: None,
                    delay: 0,
                },
                update: (cost > 0).then_some(ConcurrencyState { held: after }),
            });
        }
        Ok(Outcome {
            decision: Decision {
                allowed: false,
                limit: self.max,
                remaining: self.max.saturating_sub(held),
                reset_after: self.reset(held),
                retry_after: Some(RETRY_HINT.min(self.lease)),
                delay: 0,
            },
            update: None,
        })
    }

    fn apply(&self, state: &mut ConcurrencyState, update: ConcurrencyState) {
        *state = update;
    }

    /// A request ended: its slots are free again (never more than were
    /// held).
    fn refund(&self, state: &mut ConcurrencyState, _now: Nanos, amount: u64) {
        state.held = state.held.saturating_sub(amount);
    }

    /// Slots taken whatever is free: beyond `max` by at most `max_debt`
    /// (the key is refused until enough are released); the rest is excess.
    fn debit(
        &self,
        state: &mut ConcurrencyState,
        _now: Nanos,
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let ceiling = self.max.saturating_add(max_debt);
        let charged = amount.min(ceiling.saturating_sub(state.held));
        state.held += charged;
        Debited::of(amount, charged)
    }

    fn idle_at(&self, state: &ConcurrencyState) -> Nanos {
        if state.held == 0 { 0 } else { Nanos::MAX }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_and_given_back() {
        let c = Concurrency::new(3, 10).unwrap();
        let mut s = ConcurrencyState::default();
        assert_eq!(c.idle_at(&s), 0);
        let d = c.check_and_apply(&mut s, 0, 2).unwrap();
        assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 1, 10));
        assert_eq!(c.idle_at(&s), Nanos::MAX, "a key holding slots is kept");
        let d = c.check_and_apply(&mut s, 0, 2).unwrap();
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after),
            (false, 1, Some(10))
        );
        let peek = c.check(&s, 0, 0).unwrap().decision;
        assert!(peek.allowed);
        c.refund(&mut s, 0, 5);
        assert_eq!(s.held, 0, "never below none");
        assert!(c.check(&s, 0, 4).is_err(), "more than max never fits");
        assert_eq!(Concurrency::new(0, 1), Err(LimitError::ZeroBurst));
    }

    #[test]
    fn a_debit_holds_slots_up_to_the_debt_allowed() {
        let c = Concurrency::new(2, RETRY_HINT * 5).unwrap();
        let mut s = ConcurrencyState { held: 1 };
        assert_eq!(c.debit(&mut s, 0, 5, 1), Debited::of(5, 2));
        assert_eq!(s.held, 3);
        let d = c.check(&s, 0, 0).unwrap().decision;
        assert_eq!(
            (d.allowed, d.remaining, d.retry_after),
            (false, 0, Some(RETRY_HINT))
        );
    }
}
