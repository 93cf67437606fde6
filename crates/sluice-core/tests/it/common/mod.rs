//! Shared pieces of the integration tests.
//!
//! * [`models`]: slow, deliberately naive reference models of the six
//!   algorithms, written straight from their definitions.
//! * [`window_models`]: those of the three window algorithms.
//! * [`scenario`]: proptest strategies for limits and request sequences on a
//!   simulated clock.
//! * [`settlements`]: sequences that also debit and refund.
//!
//! Each test binary uses a different part of this module.
#![allow(dead_code)]

pub mod models;
pub mod scenario;
pub mod settlements;
pub mod window_models;

use sluice_core::Rate;

/// One millisecond in nanoseconds.
pub const MS: u64 = 1_000_000;
/// One second in nanoseconds.
pub const SEC: u64 = 1_000_000_000;
/// One minute in nanoseconds.
pub const MIN: u64 = 60 * SEC;
/// One hour in nanoseconds.
pub const HOUR: u64 = 3_600 * SEC;
/// One day in nanoseconds.
pub const DAY: u64 = 86_400 * SEC;

/// What defines a limit: `amount` per `period` ns, and a `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Units of cost per period.
    pub amount: u64,
    /// The period in nanoseconds.
    pub period: u64,
    /// The most cost admitted at once from idle.
    pub burst: u64,
}

impl Params {
    /// `amount` per `period` ns with `burst`.
    pub const fn new(amount: u64, period: u64, burst: u64) -> Self {
        Self {
            amount,
            period,
            burst,
        }
    }

    /// The engine's rate.
    pub fn rate(&self) -> Rate {
        Rate::new(self.amount, self.period).expect("amount and period are positive")
    }

    /// The window `W = burst * period / amount` ns, rounded up.
    pub fn window_ceil(&self) -> u64 {
        ceil_div(
            u128::from(self.burst) * u128::from(self.period),
            u128::from(self.amount),
        )
    }

    /// The emission interval `period / amount` ns, rounded up.
    pub fn interval_ceil(&self) -> u64 {
        ceil_div(u128::from(self.period), u128::from(self.amount))
    }

    /// The most the bucket algorithms may admit over a span of `span` ns
    /// (both ends included): the burst plus what flows in meanwhile,
    /// `B + floor(span * amount / period)`.
    pub fn bucket_bound(&self, span: u64) -> u128 {
        u128::from(self.burst)
            + u128::from(span) * u128::from(self.amount) / u128::from(self.period)
    }

    /// The index of the aligned window holding `now`:
    /// `floor(now * amount / (burst * period))`.
    pub fn window_of(&self, now: u64) -> u64 {
        let index = u128::from(now) * u128::from(self.amount)
            / (u128::from(self.burst) * u128::from(self.period));
        u64::try_from(index).expect("window index fits in u64")
    }
}

/// `ceil(a / b)` as a `u64`.
pub fn ceil_div(a: u128, b: u128) -> u64 {
    u64::try_from(a.div_ceil(b)).expect("fits in u64")
}
