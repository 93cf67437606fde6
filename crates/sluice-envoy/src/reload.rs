//! Hot reload of the YAML configs, with the guarantees of the TOML
//! config's reload: the files are read again on SIGHUP and when any of them
//! changes (the binary polls once a second), and a new set is loaded only
//! once two reads 250 ms apart agree ([`sluice_policy::settle`]), so a file caught in the middle of
//! a write is never loaded (write configs by renaming a finished file over
//! the old one, or a finished directory over the old one). A set that does
//! not load is logged with its file, line and column, counted, and the
//! running rules keep serving. A rule whose place in the tree, rate and
//! algorithm are unchanged keeps its counters; each call is answered by one
//! set of rules from start to end.

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use sluice_store::seam::Store;

use sluice_policy::reload_counts::ReloadCounts;
use sluice_policy::settle::{Settled, settled, still_changing_message};

use crate::answer::EnvoyRls;
use crate::compile::{Loading, RulesError};
use crate::load::Texts;
use crate::rules::Rules;

/// What a read of the files gave: their texts, or why they could not be
/// read (kept as text, so that a lasting error is reported once).
type Read = Result<Texts, String>;

/// Reloads the YAML configs of one service.
#[derive(Debug)]
pub struct RulesReloader {
    service: Arc<EnvoyRls>,
    paths: Vec<PathBuf>,
    store: Arc<dyn Store>,
    loading: Loading,
    last: Mutex<Option<Read>>,
    /// Held for a whole reload: SIGHUP and the poll never apply one change
    /// twice.
    reloading: Mutex<()>,
    /// Where its reloads are counted.
    counts: Arc<ReloadCounts>,
}

impl RulesReloader {
    /// A reloader of `paths` into `service`, whose rules were compiled from
    /// `loaded` (read from them, on `store`, as `loading` says): a change
    /// made since that read is loaded at the first poll.
    pub fn new(
        service: Arc<EnvoyRls>,
        paths: Vec<PathBuf>,
        store: Arc<dyn Store>,
        loading: Loading,
        loaded: Texts,
    ) -> Self {
        let last = Some(Ok(loaded));
        Self {
            service,
            paths,
            store,
            loading,
            last: Mutex::new(last),
            reloading: Mutex::new(()),
            counts: Arc::default(),
        }
    }

    /// Counts this reloader's reloads in `counts` (the server's TOML
    /// reloader's, so that one metric counts every config's reloads).
    pub fn counting_in(mut self, counts: Arc<ReloadCounts>) -> Self {
        self.counts = counts;
        self
    }

    /// Where its reloads are counted.
    pub fn counts(&self) -> &Arc<ReloadCounts> {
        &self.counts
    }

    /// Reloads the files if any changed (or always, with `force`): `true`
    /// when new rules are in force. Blocks for at least [`SETTLE`](sluice_policy::settle::SETTLE) when
    /// something changed.
    pub fn reload(&self, force: bool) -> Result<bool, RulesError> {
        let _one_at_a_time = self.reloading.lock();
        let last = self.last.lock().clone();
        let read = match settled(|| self.read(), last.as_ref(), force) {
            Settled::Unchanged => return Ok(false),
            Settled::Stable(read) => read,
            Settled::StillChanging => {
                return Err(self.failure(RulesError::Files {
                    file: self.paths_text(),
                    message: still_changing_message(),
                }));
            }
        };
        // Remember what was read, good or bad: a bad set is reported once,
        // not at every poll.
        *self.last.lock() = Some(read.clone());
        let texts = read.map_err(|message| {
            self.failure(RulesError::Files {
                file: self.paths_text(),
                message,
            })
        })?;
        let rules = Rules::compile_all(&texts, self.store.as_ref(), &self.loading)
            .map_err(|e| self.failure(e))?;
        let domains = rules.domains().len();
        self.service.replace_rules(Arc::new(rules));
        self.counts.record(true);
        tracing::info!(
            files = texts.0.len(),
            domains,
            "envoy rate limit configs reloaded"
        );
        Ok(true)
    }

    fn read(&self) -> Read {
        Texts::read(&self.paths).map_err(|e| e.to_string())
    }

    fn failure(&self, e: RulesError) -> RulesError {
        self.counts.record(false);
        tracing::error!(error = %e, "envoy config reload failed; the running rules stay");
        e
    }

    fn paths_text(&self) -> String {
        let all: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        all.join(", ")
    }
}
