//! A limiter for one key, without a map: one global limit checked in
//! process, e.g. a client's total outbound rate.
//!
//! GCRA keeps one timestamp per key, so when that timestamp fits a machine
//! word (the emission interval is a whole number of nanoseconds, as for
//! `10/s`, `100/min` or `1000/h`) the state is a single `AtomicU64` updated
//! by compare-and-swap: no lock, and threads never wait for each other.
//! The token bucket and the leaky bucket with `nodelay` make exactly GCRA's
//! decisions, so they take the same path. Every other case keeps its state
//! behind a mutex.

use std::sync::atomic::AtomicU64;

use sluice_core::{
    CheckError, Clock, Decision, LimitError, LimitSpec, Limiter, State, SystemClock,
};

use crate::atomic_gcra::AtomicGcra;

use crate::sync::Mutex;

/// One limit, one key. See the module docs.
///
/// ```
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_store::DirectLimiter;
/// let spec = LimitSpec {
///     algorithm: AlgorithmKind::Gcra,
///     rate: Rate::per_second(10),
///     burst: 3,
///     nodelay: false,
/// };
/// let limiter = DirectLimiter::new(&spec).unwrap();
/// let admitted = (0..5).filter(|_| limiter.check(1).unwrap().allowed).count();
/// assert_eq!(admitted, 3);
/// ```
#[derive(Debug)]
pub struct DirectLimiter<C: Clock = SystemClock> {
    state: Direct,
    clock: C,
}

#[derive(Debug)]
enum Direct {
    /// GCRA with its TAT in nanoseconds, in one word.
    Atomic { gcra: AtomicGcra, tat: AtomicU64 },
    /// Anything else.
    Locked {
        limiter: Limiter,
        state: Mutex<State>,
    },
}

impl DirectLimiter<SystemClock> {
    /// A limiter on the system clock.
    pub fn new(spec: &LimitSpec) -> Result<Self, LimitError> {
        Self::with_clock(spec, SystemClock::new())
    }
}

impl<C: Clock> DirectLimiter<C> {
    /// A limiter on the given clock.
    pub fn with_clock(spec: &LimitSpec, clock: C) -> Result<Self, LimitError> {
        let limiter = spec.build()?;
        let state = match AtomicGcra::for_spec(spec) {
            Some(gcra) => Direct::Atomic {
                gcra,
                tat: AtomicU64::new(0),
            },
            None => Direct::Locked {
                limiter,
                state: Mutex::new(State::Fresh),
            },
        };
        Ok(Self { state, clock })
    }

    /// Whether checks take the lock-free path.
    pub fn is_lock_free(&self) -> bool {
        matches!(self.state, Direct::Atomic { .. })
    }

    /// Checks a request of `cost` now, committing it if admitted.
    #[inline]
    pub fn check(&self, cost: u64) -> Result<Decision, CheckError> {
        let now = self.clock.now();
        match &self.state {
            Direct::Atomic { gcra, tat } => gcra.check(tat, now, cost),
            Direct::Locked { limiter, state } => {
                limiter.check_and_apply(&mut state.lock(), now, cost)
            }
        }
    }
}
