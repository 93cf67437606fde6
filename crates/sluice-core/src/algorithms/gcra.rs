//! GCRA, the generic cell rate algorithm: one timestamp per key.
//!
//! The state is the *theoretical arrival time* (TAT): when the key would be
//! fully replenished. A request of cost `n` moves the TAT `n` emission
//! intervals later (starting from `max(TAT, now)`), and passes if the new TAT
//! is at most `burst` intervals ahead of now. From idle, `burst` units pass at
//! once. Its decisions equal a token bucket's; its state is a single number.
//! A TAT more than `burst` intervals ahead is debt (see
//! [`Algorithm::debit`]): every request is refused until it is paid off.
//!
//! Time is kept in scaled units (nanoseconds times `a`, with the rate reduced
//! to `a` units per `p` ns) so that the emission interval `p / a` ns is exact.

use crate::algorithm::{Algorithm, Debited, Outcome, ensure_possible};
use crate::algorithms::bucket::Meter;
use crate::clock::Nanos;
use crate::decision::Decision;
use crate::error::{CheckError, LimitError};
use crate::math::{ceil_div, floor_div};
use crate::rate::Rate;

/// GCRA with a tolerance of `burst` emission intervals.
///
/// ```
/// use sluice_core::{Algorithm, Gcra, Rate};
/// let g = Gcra::new(Rate::per_minute(2), 2).unwrap();
/// let mut s = Default::default();
/// assert!(g.check_and_apply(&mut s, 0, 2).unwrap().allowed);
/// let refused = g.check_and_apply(&mut s, 0, 1).unwrap();
/// assert!(!refused.allowed);
/// assert_eq!(refused.retry_after, Some(30_000_000_000)); // one interval: 30 s
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gcra {
    meter: Meter,
}

/// GCRA's per-key state: the theoretical arrival time in scaled units.
///
/// Stored as two halves so that the state keeps 8-byte alignment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct GcraState {
    hi: u64,
    lo: u64,
}

impl GcraState {
    /// The theoretical arrival time in scaled units: nanoseconds times
    /// [`Gcra::scale`]. With a scale of 1 it is plain nanoseconds.
    pub fn tat(&self) -> u128 {
        (u128::from(self.hi) << 64) | u128::from(self.lo)
    }

    /// A state with the given theoretical arrival time in scaled units.
    pub fn from_tat(tat: u128) -> Self {
        Self {
            hi: (tat >> 64) as u64,
            lo: tat as u64,
        }
    }
}

impl Gcra {
    /// GCRA admitting `burst` at once and `rate` in the long run.
    pub fn new(rate: Rate, burst: u64) -> Result<Self, LimitError> {
        Ok(Self {
            meter: Meter::new(rate, burst)?,
        })
    }
}

impl Gcra {
    /// Scaled units per nanosecond: the rate reduced to `scale` units per
    /// `p` ns. When it is 1 (the emission interval is a whole number of
    /// nanoseconds, as for `10/s` or `1000/min`), the TAT is in nanoseconds.
    pub fn scale(&self) -> u64 {
        self.meter.a
    }

    /// The rate, reduced: `a` units of cost per `p` nanoseconds.
    pub fn reduced_rate(&self) -> (u64, u64) {
        (self.meter.a, self.meter.p)
    }

    /// The capacity in scaled units: how far ahead of now the TAT may run.
    pub fn tolerance(&self) -> u128 {
        u128::from(self.meter.cap)
    }

    /// [`check`](Algorithm::check) on a TAT held as plain nanoseconds, in
    /// 64-bit arithmetic: for a [`scale`](Self::scale) of 1, where it gives
    /// exactly `check`'s decision and update. Returns the new TAT when the
    /// request is admitted with a cost. The caller keeps `tat` and
    /// `now + tolerance` below `u64::MAX` (a store that holds the TAT in one
    /// atomic word); values beyond saturate.
    #[inline]
    pub fn check_nanos(
        &self,
        tat: Nanos,
        now: Nanos,
        cost: u64,
    ) -> Result<(Decision, Option<Nanos>), CheckError> {
        let m = &self.meter;
        ensure_possible(cost, m.burst)?;
        debug_assert_eq!(m.a, 1, "check_nanos needs a scale of 1");
        let base = tat.max(now);
        // cost <= burst, so cost * p <= cap: no overflow.
        let new_tat = base.saturating_add(cost * m.p);
        let ahead = new_tat - now;
        if ahead <= m.cap {
            let decision = Decision {
                allowed: true,
                limit: m.burst,
                remaining: (m.cap - ahead) / m.p,
                reset_after: ahead,
                retry_after: None,
                delay: 0,
            };
            Ok((decision, (cost > 0).then_some(new_tat)))
        } else {
            let used = base - now;
            let decision = Decision {
                allowed: false,
                limit: m.burst,
                remaining: m.cap.saturating_sub(used) / m.p,
                reset_after: used,
                retry_after: Some(ahead - m.cap),
                delay: 0,
            };
            Ok((decision, None))
        }
    }
}

impl Algorithm for Gcra {
    type State = GcraState;
    type Update = GcraState;

    fn capacity(&self) -> u64 {
        self.meter.burst
    }

    #[inline]
    fn check(
        &self,
        state: &GcraState,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<GcraState>, CheckError> {
        let m = &self.meter;
        ensure_possible(cost, m.burst)?;
        let (a, p, cap) = (u128::from(m.a), u128::from(m.p), u128::from(m.cap));
        let now_s = u128::from(now) * a;
        let base = state.tat().max(now_s);
        let new_tat = base + u128::from(cost) * p;
        let ahead = new_tat - now_s;
        if ahead <= cap {
            let decision = Decision {
                allowed: true,
                limit: m.burst,
                remaining: floor_div(cap - ahead, p),
                reset_after: ceil_div(ahead, a),
                retry_after: None,
                delay: 0,
            };
            let update = (cost > 0).then(|| GcraState::from_tat(new_tat));
            Ok(Outcome { decision, update })
        } else {
            let used = base - now_s;
            let decision = Decision {
                allowed: false,
                limit: m.burst,
                remaining: floor_div(cap.saturating_sub(used), p),
                reset_after: ceil_div(used, a),
                retry_after: Some(ceil_div(ahead - cap, a)),
                delay: 0,
            };
            Ok(Outcome {
                decision,
                update: None,
            })
        }
    }

    #[inline]
    fn apply(&self, state: &mut GcraState, update: GcraState) {
        // Never move the TAT backwards, even if updates are applied late.
        if update.tat() > state.tat() {
            *state = update;
        }
    }

    /// The TAT moves `amount` emission intervals earlier, but never before
    /// now: a TAT in the past is a full limit already. A TAT more than the
    /// burst ahead (debt) moves back by the whole amount.
    fn refund(&self, state: &mut GcraState, now: Nanos, amount: u64) {
        let m = &self.meter;
        let now_s = u128::from(now) * u128::from(m.a);
        let tat = state.tat();
        if tat > now_s {
            let back = u128::from(amount) * u128::from(m.p);
            *state = GcraState::from_tat(tat.saturating_sub(back).max(now_s));
        }
    }

    /// The TAT moves `charged` intervals later (from `max(TAT, now)`), up
    /// to `burst + max_debt` intervals ahead of now; debt never takes it
    /// past `u64::MAX` nanoseconds (so that a store holding the TAT in one
    /// 64-bit word, at a scale of 1, can keep it).
    fn debit(&self, state: &mut GcraState, now: Nanos, amount: u64, max_debt: u64) -> Debited {
        let m = &self.meter;
        let (a, p) = (u128::from(m.a), u128::from(m.p));
        let now_s = u128::from(now) * a;
        let base = state.tat().max(now_s);
        let full = now_s + u128::from(m.cap);
        let ceiling = full
            .saturating_add(u128::from(max_debt) * p)
            .min(full.max(u128::from(u64::MAX) * a));
        let room = ceiling.saturating_sub(base) / p;
        // At most `amount`, so it fits.
        let charged = room.min(u128::from(amount)) as u64;
        if charged > 0 {
            *state = GcraState::from_tat(base + u128::from(charged) * p);
        }
        Debited::of(amount, charged)
    }

    fn idle_at(&self, state: &GcraState) -> Nanos {
        ceil_div(state.tat(), u128::from(self.meter.a))
    }
}
