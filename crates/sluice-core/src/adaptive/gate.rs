//! The gate: admission against the adaptive limit, shedding the lowest
//! priority class first.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use super::config::{ConfigError, GateConfig, MAX_CLASSES};
use super::limit::AdaptiveLimit;
use crate::clock::Nanos;

/// Parts per million, for the class shares.
const PPM: u64 = 1_000_000;

/// Admission to an upstream under an adaptive concurrency limit, shared by
/// all the requests to it (it is `Send + Sync`; wrap it in an `Arc`).
///
/// **Shedding rule.** With `n` classes (0 the lowest) and current limit `L`,
/// class `k` has the share `s_k = lowest_share + (1 - lowest_share) * k /
/// (n - 1)` (the top class's share is 1; with one class it is 1), and the
/// threshold `t_k = max(1, floor(L * s_k))`. A request of class `k` is
/// admitted if and only if the total in flight, all classes together, is
/// below `t_k`. Thresholds rise with the class, so whenever a request of
/// class `k` is shed, every class below `k` is being shed too: the lowest
/// class is shed first, and the top class only when the whole limit is in
/// use.
///
/// The limit grows only while the lowest class's threshold is busy: the
/// gate runs its [`AdaptiveLimit`] with `growth_utilisation` multiplied by
/// `lowest_share`, so healthy load sits well below the lowest threshold.
///
/// Admission is a few atomic operations; [`leave`](Gate::leave) takes one
/// short lock to feed the sample to the [`AdaptiveLimit`].
///
/// ```
/// use sluice_core::adaptive::{Gate, GateConfig, Outcome};
///
/// // Three classes: 0 = "free", 1 = "pro", 2 = "enterprise".
/// let gate = Gate::new(GateConfig { classes: 3, ..GateConfig::default() }).unwrap();
/// let now = 1_000_000_000;
/// match gate.try_enter(2, now) {
///     Ok(entry) => {
///         // ... forward the request upstream, then:
///         gate.leave(entry, now + 15_000_000, Outcome::Success);
///     }
///     Err(shed) => {
///         // Answer 503 with `Retry-After` from `shed.retry_after`.
///         let _ = shed.retry_after;
///     }
/// }
/// assert_eq!(gate.snapshot().in_flight, 0);
/// ```
#[derive(Debug)]
pub struct Gate {
    classes: usize,
    /// Each class's share of the limit, in parts per million.
    shares: [u64; MAX_CLASSES],
    limit: AtomicU32,
    in_flight: AtomicU32,
    class_in_flight: [AtomicU32; MAX_CLASSES],
    admitted: [AtomicU64; MAX_CLASSES],
    shed: [AtomicU64; MAX_CLASSES],
    /// Sheds not yet told to the estimator.
    pending_sheds: AtomicU64,
    /// The suggested wait for shed requests, in nanoseconds.
    retry_after: AtomicU64,
    /// The estimator's minimum and last latencies (0: none yet).
    min_latency: AtomicU64,
    last_latency: AtomicU64,
    estimator: Mutex<AdaptiveLimit>,
}

/// A request admitted by a [`Gate`]: end it with [`Gate::leave`].
///
/// An entry dropped without `leave` keeps its place in flight for good; end
/// abandoned requests with [`Outcome::Cancelled`].
#[derive(Debug)]
#[must_use = "an entry must be ended with Gate::leave, or it stays in flight"]
pub struct Entry {
    class: u8,
    start: Nanos,
    in_flight: u32,
}

impl Entry {
    /// The class it was admitted in.
    pub fn class(&self) -> usize {
        usize::from(self.class)
    }

    /// When it was admitted.
    pub fn start(&self) -> Nanos {
        self.start
    }
}

/// A request refused by a [`Gate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shed {
    /// The class it asked for (after clamping to the top class).
    pub class: usize,
    /// A suggested wait before retrying: the latency of the last sampling
    /// window, or the window's length if that is longer (the limit is
    /// recomputed at most once a window).
    pub retry_after: Nanos,
    /// The limit when it was refused.
    pub limit: u32,
    /// The total in flight when it was refused.
    pub in_flight: u32,
}

/// How an admitted request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The upstream answered: its latency is a sample.
    Success,
    /// The upstream shed or refused it for overload (for instance a 503 or
    /// 429 it sent, or a reset): counted as a drop, which cuts the limit.
    Dropped,
    /// The upstream failed for another reason (a 500, a refused
    /// connection): no sample, since a fast failure says nothing of load.
    UpstreamError,
    /// It timed out: counted as a drop.
    Timeout,
    /// The client went away first: no sample.
    Cancelled,
}

/// One class in a [`GateSnapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClassSnapshot {
    /// Its requests in flight.
    pub in_flight: u32,
    /// The total in flight below which it is admitted, at the current limit.
    pub threshold: u32,
    /// Its requests admitted so far.
    pub admitted: u64,
    /// Its requests shed so far.
    pub shed: u64,
}

/// A gate's state, for metrics. Read field by field, without a lock, so the
/// fields may be from slightly different instants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateSnapshot {
    /// The current limit.
    pub limit: u32,
    /// The total in flight.
    pub in_flight: u32,
    /// The minimum latency estimate, once known.
    pub min_latency: Option<Nanos>,
    /// The latency percentile of the last sampling window, once known.
    pub last_latency: Option<Nanos>,
    /// Each class, the lowest first.
    pub classes: Vec<ClassSnapshot>,
}

fn nonzero(x: u64) -> Option<Nanos> {
    (x != 0).then_some(x)
}

impl Gate {
    /// A gate with nothing in flight, at the initial limit.
    pub fn new(config: GateConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        // The limit grows only while the lowest class's part of it is busy,
        // so that healthy load leaves the lowest class room.
        let mut limit_config = config.limit;
        limit_config.growth_utilisation *= config.lowest_share;
        let estimator = AdaptiveLimit::new(limit_config)?;
        let n = config.classes;
        let mut shares = [PPM; MAX_CLASSES];
        for (k, share) in shares.iter_mut().enumerate().take(n.saturating_sub(1)) {
            let s = config.lowest_share + (1.0 - config.lowest_share) * k as f64 / (n - 1) as f64;
            // s is in (0, 1]; rounding keeps it so.
            *share = ((s * PPM as f64).round() as u64).clamp(1, PPM);
        }
        Ok(Self {
            classes: n,
            shares,
            limit: AtomicU32::new(estimator.limit()),
            in_flight: AtomicU32::new(0),
            class_in_flight: std::array::from_fn(|_| AtomicU32::new(0)),
            admitted: std::array::from_fn(|_| AtomicU64::new(0)),
            shed: std::array::from_fn(|_| AtomicU64::new(0)),
            pending_sheds: AtomicU64::new(0),
            retry_after: AtomicU64::new(config.limit.window),
            min_latency: AtomicU64::new(0),
            last_latency: AtomicU64::new(0),
            estimator: Mutex::new(estimator),
        })
    }

    /// How many classes it has.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.limit.load(Ordering::Relaxed)
    }

    /// The total in flight.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The total in flight below which `class` is admitted at `limit`.
    fn threshold(&self, class: usize, limit: u32) -> u32 {
        let t = u64::from(limit) * self.shares[class] / PPM;
        // t <= limit, so it fits.
        (t as u32).max(1)
    }

    /// Admits a request of `class` (0 the lowest; a class past the top is
    /// taken as the top class) at `now`, or sheds it (see the rule on
    /// [`Gate`]).
    pub fn try_enter(&self, class: usize, now: Nanos) -> Result<Entry, Shed> {
        let class = class.min(self.classes - 1);
        let limit = self.limit.load(Ordering::Relaxed);
        let threshold = self.threshold(class, limit);
        let admitted = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < threshold).then_some(n + 1)
            });
        match admitted {
            Ok(before) => {
                self.class_in_flight[class].fetch_add(1, Ordering::Relaxed);
                self.admitted[class].fetch_add(1, Ordering::Relaxed);
                Ok(Entry {
                    // class < MAX_CLASSES = 16.
                    class: class as u8,
                    start: now,
                    in_flight: before + 1,
                })
            }
            Err(in_flight) => {
                self.shed[class].fetch_add(1, Ordering::Relaxed);
                self.pending_sheds.fetch_add(1, Ordering::Relaxed);
                Err(Shed {
                    class,
                    retry_after: self.retry_after.load(Ordering::Relaxed),
                    limit,
                    in_flight,
                })
            }
        }
    }

    /// Ends an admitted request at `now`: it leaves the in-flight count, and
    /// its latency (`now` minus its start) and outcome feed the limit.
    pub fn leave(&self, entry: Entry, now: Nanos, outcome: Outcome) {
        let class = entry.class();
        self.class_in_flight[class].fetch_sub(1, Ordering::Relaxed);
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        let dropped = match outcome {
            Outcome::Success => false,
            Outcome::Dropped | Outcome::Timeout => true,
            Outcome::UpstreamError | Outcome::Cancelled => return,
        };
        let latency = now.saturating_sub(entry.start);
        let mut est = self
            .estimator
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        est.note_sheds(self.pending_sheds.swap(0, Ordering::Relaxed));
        if est.record(now, latency, entry.in_flight, dropped) {
            self.limit.store(est.limit(), Ordering::Relaxed);
            let last = est.last_latency().unwrap_or(0);
            let window = est.config().window;
            self.retry_after.store(last.max(window), Ordering::Relaxed);
            self.min_latency
                .store(est.min_latency().unwrap_or(0), Ordering::Relaxed);
            self.last_latency.store(last, Ordering::Relaxed);
        }
    }

    /// The current state, for metrics.
    pub fn snapshot(&self) -> GateSnapshot {
        let limit = self.limit();
        let classes = (0..self.classes)
            .map(|k| ClassSnapshot {
                in_flight: self.class_in_flight[k].load(Ordering::Relaxed),
                threshold: self.threshold(k, limit),
                admitted: self.admitted[k].load(Ordering::Relaxed),
                shed: self.shed[k].load(Ordering::Relaxed),
            })
            .collect();
        GateSnapshot {
            limit,
            in_flight: self.in_flight(),
            min_latency: nonzero(self.min_latency.load(Ordering::Relaxed)),
            last_latency: nonzero(self.last_latency.load(Ordering::Relaxed)),
            classes,
        }
    }
}
