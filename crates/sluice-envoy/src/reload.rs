//! Hot reload of the YAML configs, with the guarantees of the TOML
//! config's reload: the files are read again on SIGHUP and when any of them
//! changes (the binary polls once a second), and a new set is loaded only
//! once two reads [`SETTLE`] apart agree, so a file caught in the middle of
//! a write is never loaded (write configs by renaming a finished file over
//! the old one, or a finished directory over the old one). A set that does
//! not load is logged with its file, line and column, counted, and the
//! running rules keep serving. A rule whose place in the tree, rate and
//! algorithm are unchanged keeps its counters; each call is answered by one
//! set of rules from start to end.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use sluice_store::seam::Store;

use crate::answer::EnvoyRls;
use crate::compile::{Loading, RulesError};
use crate::load::Texts;
use crate::rules::Rules;

/// How long changed files must stay the same before they are loaded.
pub const SETTLE: Duration = Duration::from_millis(250);

/// How many times a forced reload waits [`SETTLE`] for files that keep
/// changing before it gives up.
const SETTLE_TRIES: usize = 10;

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
    succeeded: AtomicU64,
    failed: AtomicU64,
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
            succeeded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
        }
    }

    /// Reloads that took effect, and reloads that failed.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.succeeded.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }

    /// Reloads the files if any changed (or always, with `force`): `true`
    /// when new rules are in force. Blocks for at least [`SETTLE`] when
    /// something changed.
    pub fn reload(&self, force: bool) -> Result<bool, RulesError> {
        let _one_at_a_time = self.reloading.lock();
        let mut read = self.read();
        if !force && self.last.lock().as_ref() == Some(&read) {
            return Ok(false);
        }
        let mut tries = if force { SETTLE_TRIES } else { 1 };
        loop {
            std::thread::sleep(SETTLE);
            let again = self.read();
            if again == read {
                break;
            }
            read = again;
            tries -= 1;
            if tries == 0 {
                if !force {
                    return Ok(false);
                }
                return Err(self.failure(RulesError::Files {
                    file: self.paths_text(),
                    message: format!(
                        "the files kept changing for {:?}; write configs by renaming finished files over the old ones",
                        SETTLE * SETTLE_TRIES as u32
                    ),
                }));
            }
        }
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
        self.succeeded.fetch_add(1, Ordering::Relaxed);
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
        self.failed.fetch_add(1, Ordering::Relaxed);
        tracing::error!(error = %e, "envoy config reload failed; the running rules stay");
        e
    }

    fn paths_text(&self) -> String {
        let all: Vec<String> = self.paths.iter().map(|p| p.display().to_string()).collect();
        all.join(", ")
    }
}
