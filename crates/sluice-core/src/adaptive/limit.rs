//! The estimator: a concurrency limit that follows the upstream's latency.

use super::config::{AdaptiveConfig, ConfigError, WINDOW_SAMPLES};
use crate::clock::Nanos;

/// An adaptive concurrency limit: a gradient controller over sampling
/// windows, after Envoy's adaptive concurrency filter and Netflix's
/// `Gradient2Limit` (the full rule is in `docs/overload.md`).
///
/// Each finished request is a sample: its latency, how many requests were in
/// flight when it started, and whether it was dropped or timed out. Samples
/// gather in a window; when the window closes (at least
/// [`window`](AdaptiveConfig::window) long and
/// [`min_window_samples`](AdaptiveConfig::min_window_samples) samples), its
/// latency percentile `rtt` is compared with the minimum latency estimate
/// `min_rtt`:
///
/// * `gradient = clamp(min_rtt * (1 + buffer) / rtt, min_gradient, 1)`;
/// * if `gradient < 1` (queueing), `limit = limit * gradient`;
/// * else, if the window was busy (peak in flight at least
///   `growth_utilisation * limit`, or a request shed), `limit += sqrt(limit)`;
/// * a window with too many drops or timeouts cuts by `min_gradient`.
///
/// The limit stays within `[min_limit, max_limit]`. It is deterministic: it
/// reads no clock and draws no random numbers.
///
/// ```
/// use sluice_core::adaptive::{AdaptiveConfig, AdaptiveLimit};
///
/// let mut limit = AdaptiveLimit::new(AdaptiveConfig::default()).unwrap();
/// let ms = 1_000_000;
/// // Fast, busy windows: the limit grows.
/// for i in 0..100 {
///     limit.record(i * 10 * ms, 10 * ms, 20, false);
/// }
/// assert!(limit.limit() > 20);
/// ```
#[derive(Debug, Clone)]
pub struct AdaptiveLimit {
    config: AdaptiveConfig,
    limit: f64,
    min_rtt: Option<Nanos>,
    last_rtt: Option<Nanos>,
    window: Window,
    epoch: Epoch,
    windows_at_min: u32,
}

/// The samples of the open window.
#[derive(Debug, Clone)]
struct Window {
    start: Option<Nanos>,
    latencies: [Nanos; WINDOW_SAMPLES],
    /// Latency samples seen (only the latest `WINDOW_SAMPLES` are kept).
    seen: u32,
    drops: u32,
    peak_in_flight: u32,
    sheds: u64,
}

/// The minimum latency's re-measurement period.
#[derive(Debug, Clone, Copy)]
struct Epoch {
    start: Option<Nanos>,
    windows: u32,
    /// Windows in which no request was shed.
    free_windows: u32,
    /// The lowest latency of a window in which no request was shed.
    free_min: Option<Nanos>,
}

impl Epoch {
    const NEW: Epoch = Epoch {
        start: None,
        windows: 0,
        free_windows: 0,
        free_min: None,
    };
}

impl Window {
    fn new() -> Self {
        Self {
            start: None,
            latencies: [0; WINDOW_SAMPLES],
            seen: 0,
            drops: 0,
            peak_in_flight: 0,
            sheds: 0,
        }
    }

    fn samples(&self) -> u32 {
        self.seen.saturating_add(self.drops)
    }

    /// The `p`th percentile of the kept latencies (nearest rank).
    fn percentile(&self, p: u8) -> Option<Nanos> {
        let kept = (self.seen as usize).min(WINDOW_SAMPLES);
        if kept == 0 {
            return None;
        }
        let mut sorted = self.latencies;
        let sorted = &mut sorted[..kept];
        sorted.sort_unstable();
        let rank = (kept * usize::from(p)).div_ceil(100).max(1);
        Some(sorted[rank - 1])
    }
}

fn min_opt(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl AdaptiveLimit {
    /// A limit at `config.initial_limit`, with no latency known yet.
    pub fn new(config: AdaptiveConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            limit: f64::from(config.initial_limit),
            min_rtt: None,
            last_rtt: None,
            window: Window::new(),
            epoch: Epoch::NEW,
            windows_at_min: 0,
        })
    }

    /// The parameters.
    pub fn config(&self) -> &AdaptiveConfig {
        &self.config
    }

    /// The current limit, in `[min_limit, max_limit]`.
    pub fn limit(&self) -> u32 {
        // The float is kept within the bounds, which fit in a u32.
        (self.limit as u32).clamp(self.config.min_limit, self.config.max_limit)
    }

    /// The minimum latency estimate (the baseline), once a window has closed.
    pub fn min_latency(&self) -> Option<Nanos> {
        self.min_rtt
    }

    /// The latency percentile of the last closed window.
    pub fn last_latency(&self) -> Option<Nanos> {
        self.last_rtt
    }

    /// Counts requests shed since the last call, for the open window: a
    /// window with sheds is one where the limit was binding.
    pub fn note_sheds(&mut self, sheds: u64) {
        self.window.sheds = self.window.sheds.saturating_add(sheds);
    }

    /// Records one finished request: its `latency`, the requests in flight
    /// when it started (itself included), and whether it was dropped or
    /// timed out (then its latency is not used, only counted as a drop).
    ///
    /// Returns `true` if this sample closed a window and the limit was
    /// recomputed (it may be unchanged).
    pub fn record(&mut self, now: Nanos, latency: Nanos, in_flight: u32, dropped: bool) -> bool {
        let w = &mut self.window;
        let start = *w.start.get_or_insert(now);
        self.epoch.start.get_or_insert(start);
        if dropped {
            w.drops = w.drops.saturating_add(1);
        } else {
            w.latencies[w.seen as usize % WINDOW_SAMPLES] = latency;
            w.seen = w.seen.saturating_add(1);
        }
        w.peak_in_flight = w.peak_in_flight.max(in_flight);
        let due = now.saturating_sub(start) >= self.config.window
            && w.samples() >= self.config.min_window_samples;
        if due {
            self.close_window(now);
        }
        due
    }

    /// Closes the open window: updates the minimum latency and the limit.
    fn close_window(&mut self, now: Nanos) {
        let c = self.config;
        let rtt = self.window.percentile(c.percentile);
        let busy_shed = self.window.sheds > 0;
        let congested_by_drops =
            f64::from(self.window.drops) >= c.drop_fraction * f64::from(self.window.samples());
        let busy =
            busy_shed || f64::from(self.window.peak_in_flight) >= c.growth_utilisation * self.limit;

        if rtt.is_some() {
            self.last_rtt = rtt;
            self.min_rtt = min_opt(self.min_rtt, rtt);
        }
        self.epoch.windows += 1;
        if !busy_shed {
            self.epoch.free_windows += 1;
            self.epoch.free_min = min_opt(self.epoch.free_min, rtt);
        }

        let gradient = if congested_by_drops && self.window.drops > 0 {
            Some(c.min_gradient)
        } else {
            match (self.min_rtt, rtt) {
                (Some(min), Some(rtt)) if rtt > 0 => {
                    let g = min as f64 * (1.0 + c.buffer) / rtt as f64;
                    Some(g.clamp(c.min_gradient, 1.0))
                }
                // A zero latency shows no queueing.
                (Some(_), Some(_)) => Some(1.0),
                // Nothing to judge by (only cancelled or errored requests).
                _ => None,
            }
        };
        let mut limit = self.limit;
        match gradient {
            Some(g) if g < 1.0 => limit *= g,
            Some(_) if busy => limit += limit.sqrt(),
            _ => {}
        }
        self.limit = limit.clamp(f64::from(c.min_limit), f64::from(c.max_limit));

        self.track_min_rtt(now, rtt);
        self.window = Window::new();
        self.window.start = Some(now);
    }

    /// Re-measures the minimum latency where it may be stale: at the end of
    /// an epoch in which the limit was mostly not binding, or when the limit
    /// has sat at its minimum for `reprobe_windows` windows.
    fn track_min_rtt(&mut self, now: Nanos, rtt: Option<Nanos>) {
        let c = self.config;
        if self.limit() <= c.min_limit {
            self.windows_at_min += 1;
        } else {
            self.windows_at_min = 0;
        }
        if self.windows_at_min >= c.reprobe_windows && rtt.is_some() {
            // The limit is as low as it goes, so this window's latency was
            // measured with the concurrency pinned low: take it as the new
            // minimum, and start a new epoch from it.
            self.min_rtt = rtt;
            self.windows_at_min = 0;
            self.epoch = Epoch::NEW;
            self.epoch.start = Some(now);
            return;
        }
        let epoch_start = self.epoch.start.unwrap_or(now);
        if now.saturating_sub(epoch_start) >= c.baseline_epoch {
            let mostly_free = self.epoch.free_windows * 2 >= self.epoch.windows;
            if mostly_free && self.epoch.free_min.is_some() {
                self.min_rtt = self.epoch.free_min;
            }
            self.epoch = Epoch::NEW;
            self.epoch.start = Some(now);
        }
    }
}
