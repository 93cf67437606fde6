//! Parameters of the adaptive limit and of the gate, with their defaults and
//! validation.

use thiserror::Error;

use crate::clock::Nanos;

/// The most priority classes a [`Gate`](super::Gate) accepts.
pub const MAX_CLASSES: usize = 16;

/// The most latency samples a sampling window keeps for its percentile; a
/// busier window keeps its latest ones.
pub const WINDOW_SAMPLES: usize = 64;

/// Parameters of an [`AdaptiveLimit`](super::AdaptiveLimit).
///
/// The defaults follow Envoy's gradient controller and Netflix's
/// `Gradient2Limit` (see `docs/overload.md`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptiveConfig {
    /// The limit before any sample (default 20).
    pub initial_limit: u32,
    /// The lowest the limit goes (default 4).
    pub min_limit: u32,
    /// The highest the limit goes (default 1000).
    pub max_limit: u32,
    /// The shortest sampling window (default 100 ms). A window closes, and the
    /// limit is recomputed, at the first sample at least this long after the
    /// window opened, once it holds `min_window_samples` samples.
    pub window: Nanos,
    /// The fewest samples (latencies and drops) a window needs before it
    /// closes (default 10).
    pub min_window_samples: u32,
    /// The percentile of a window's latencies that summarises it, 1 to 100
    /// (default 90).
    pub percentile: u8,
    /// How much slower than the minimum latency a window may be before the
    /// limit goes down, as a fraction of the minimum (default 0.25).
    pub buffer: f64,
    /// The most one window can cut the limit: the new limit is at least this
    /// fraction of the old one (default 0.5).
    pub min_gradient: f64,
    /// The limit grows only if a window's peak in flight reached this
    /// fraction of the limit, or a request was shed in it (default 0.5). A
    /// [`Gate`](super::Gate) multiplies it by its `lowest_share`.
    pub growth_utilisation: f64,
    /// A window whose drops and timeouts reach this fraction of its samples
    /// cuts the limit by `min_gradient` whatever its latency (default 0.05).
    pub drop_fraction: f64,
    /// The minimum latency is re-measured over each epoch of this length
    /// (default 10 s); see `docs/overload.md`.
    pub baseline_epoch: Nanos,
    /// After this many consecutive windows with the limit at `min_limit`, the
    /// minimum latency is re-measured from the last window (default 5).
    pub reprobe_windows: u32,
}

impl Default for AdaptiveConfig {
    fn default() -> Self {
        Self {
            initial_limit: 20,
            min_limit: 4,
            max_limit: 1000,
            window: 100_000_000,
            min_window_samples: 10,
            percentile: 90,
            buffer: 0.25,
            min_gradient: 0.5,
            growth_utilisation: 0.5,
            drop_fraction: 0.05,
            baseline_epoch: 10_000_000_000,
            reprobe_windows: 5,
        }
    }
}

/// Parameters of a [`Gate`](super::Gate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateConfig {
    /// The adaptive limit's parameters.
    pub limit: AdaptiveConfig,
    /// How many priority classes, 1 to [`MAX_CLASSES`] (default 1). Class 0
    /// is the lowest.
    pub classes: usize,
    /// The share of the limit the lowest class may fill, in (0, 1] (default
    /// 0.5). The shares of the classes above it rise in equal steps up to 1
    /// for the top class.
    pub lowest_share: f64,
}

impl Default for GateConfig {
    fn default() -> Self {
        Self {
            limit: AdaptiveConfig::default(),
            classes: 1,
            lowest_share: 0.5,
        }
    }
}

/// Unusable parameters of an adaptive limit or a gate.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    /// The bounds are out of order, or the lower one is zero.
    #[error(
        "limits must satisfy 1 <= min_limit ({min}) <= initial_limit ({initial}) <= max_limit ({max})"
    )]
    Bounds {
        /// The minimum limit.
        min: u32,
        /// The initial limit.
        initial: u32,
        /// The maximum limit.
        max: u32,
    },
    /// A parameter is outside its range.
    #[error("{name} must be {range}")]
    OutOfRange {
        /// The parameter's name.
        name: &'static str,
        /// Its allowed range, in words.
        range: &'static str,
    },
}

fn check(ok: bool, name: &'static str, range: &'static str) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange { name, range })
    }
}

fn fraction(x: f64) -> bool {
    x > 0.0 && x <= 1.0
}

impl AdaptiveConfig {
    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let (min, initial, max) = (self.min_limit, self.initial_limit, self.max_limit);
        if min == 0 || min > initial || initial > max {
            return Err(ConfigError::Bounds { min, initial, max });
        }
        check(self.window > 0, "window", "positive")?;
        check(
            self.min_window_samples > 0,
            "min_window_samples",
            "positive",
        )?;
        check(
            (1..=100).contains(&self.percentile),
            "percentile",
            "in 1..=100",
        )?;
        check(
            self.buffer.is_finite() && self.buffer >= 0.0,
            "buffer",
            "finite and >= 0",
        )?;
        check(fraction(self.min_gradient), "min_gradient", "in (0, 1]")?;
        check(
            fraction(self.growth_utilisation),
            "growth_utilisation",
            "in (0, 1]",
        )?;
        check(fraction(self.drop_fraction), "drop_fraction", "in (0, 1]")?;
        check(self.baseline_epoch > 0, "baseline_epoch", "positive")?;
        check(self.reprobe_windows > 0, "reprobe_windows", "positive")
    }
}

impl GateConfig {
    /// Checks the parameters, the limit's included.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.limit.validate()?;
        check(
            (1..=MAX_CLASSES).contains(&self.classes),
            "classes",
            "in 1..=16",
        )?;
        check(fraction(self.lowest_share), "lowest_share", "in (0, 1]")
    }
}
