//! Config loads after the first, counted once for every kind of config a
//! server reloads (its TOML, Envoy's YAML), so that one metric
//! (`sluice_config_reloads_total`) counts them all.

use std::sync::atomic::{AtomicU64, Ordering};

/// Reloads that put a new config in force, and reloads that failed (the
/// running config stayed). A reload that found nothing changed counts in
/// neither.
///
/// ```
/// let counts = sluice_policy::reload_counts::ReloadCounts::default();
/// counts.record(true);
/// counts.record(false);
/// assert_eq!((counts.succeeded(), counts.failed()), (1, 1));
/// ```
#[derive(Debug, Default)]
pub struct ReloadCounts {
    succeeded: AtomicU64,
    failed: AtomicU64,
}

impl ReloadCounts {
    /// Counts one reload: applied (`true`) or failed.
    pub fn record(&self, applied: bool) {
        let count = if applied {
            &self.succeeded
        } else {
            &self.failed
        };
        count.fetch_add(1, Ordering::Relaxed);
    }

    /// Reloads that put a new config in force.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }

    /// Reloads that failed (the running config stayed).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}
