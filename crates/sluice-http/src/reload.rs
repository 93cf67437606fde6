//! Hot reload: read the config file again and swap the engine's policy.
//!
//! Triggers (wired by the binary): SIGHUP, a change to the file or to its
//! `[client] keys_file` (both polled once a second), and
//! `POST /admin/reload`. A config that does not load is
//! logged with its file, line and column, counted, and the running config
//! keeps serving. Limits whose definition did not change keep their
//! counters; each request is decided by one config from start to end.
//! Addresses, the upstream, the store and `[envoy]` are read at start only:
//! changing them is logged and needs a restart.
//!
//! A file that is still being written is never loaded: a new text is
//! loaded only once two reads [`SETTLE`] apart agree (write configs by
//! renaming a finished file over the old one, which is atomic). A config
//! with no limits at all is refused unless it says `no_limits = true`, and a
//! reload that removes limits or plans names them at WARN and counts them
//! (`sluice_config_removed_total`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_policy::reload_counts::ReloadCounts;
use sluice_policy::settle::{Settled, settled, still_changing_message};
use sluice_policy::{ConfigError, Deployment, Engine, Policy, Source};

pub use sluice_policy::settle::SETTLE;

/// Reloads one config file into one engine.
#[derive(Debug)]
pub struct Reloader {
    engine: Arc<Engine>,
    /// The file; none for a config made at start from the environment
    /// (`sluice envoy-ratelimit`), which no reload changes.
    path: Option<PathBuf>,
    last_text: Mutex<Option<Snapshot>>,
    /// Reloads, of this file and of any other config counted with it
    /// (Envoy's YAML: see [`counts`](Self::counts)).
    counts: Arc<ReloadCounts>,
    /// Limits and plans that reloads removed.
    removed_limits: AtomicU64,
    removed_plans: AtomicU64,
    /// The deployment settings the file had at start (before any command
    /// line override): a reload that changes them is logged as needing a
    /// restart.
    started: Deployment,
    /// The hash of the config text in force.
    version: Mutex<String>,
    /// Held for a whole reload: two triggers at once (SIGHUP and the file
    /// poll) must not both apply one change, and count its removals twice.
    reloading: Mutex<()>,
}

/// A short, stable hash of a config's text: its version.
pub fn config_version(text: &str) -> String {
    format!("{:08x}", sluice_store::fnv1a(text.as_bytes()) as u32)
}

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// The new config is in force.
    Applied,
    /// The file has not changed since the last load.
    Unchanged,
}

impl Reloader {
    /// A reloader for `engine`, whose config was loaded from `path` with
    /// the deployment settings `started` (as the file has them, before any
    /// command-line override): a reload that changes those is logged as
    /// needing a restart.
    pub fn new(engine: Arc<Engine>, path: PathBuf, started: Deployment) -> Self {
        let text = snapshot(&engine, &path);
        Self::with(engine, Some(path), started, text)
    }

    /// A reloader for a config made at start, with no file behind it (from
    /// the environment): its version is `text`'s, and a reload finds
    /// nothing changed. Its counts still count the server's other configs'
    /// reloads (Envoy's YAML).
    pub fn without_file(engine: Arc<Engine>, started: Deployment, text: &str) -> Self {
        let text = Some(Snapshot {
            config: text.to_owned(),
            keys: None,
        });
        Self::with(engine, None, started, text)
    }

    fn with(
        engine: Arc<Engine>,
        path: Option<PathBuf>,
        started: Deployment,
        text: Option<Snapshot>,
    ) -> Self {
        Self {
            engine,
            path,
            started,
            version: Mutex::new(version_of(text.as_ref())),
            reloading: Mutex::new(()),
            last_text: Mutex::new(text),
            counts: Arc::default(),
            removed_limits: AtomicU64::new(0),
            removed_plans: AtomicU64::new(0),
        }
    }

    /// Reloads the file if its text changed (or always, with `force`).
    ///
    /// A changed text is loaded only once a second read, [`SETTLE`] later,
    /// agrees with it. A poll (`force` false) that finds the file still
    /// changing leaves it to the next poll; a forced reload waits for it a
    /// few times, then fails.
    pub fn reload(&self, force: bool) -> Result<Reloaded, ConfigError> {
        let Some(path) = &self.path else {
            return Ok(Reloaded::Unchanged);
        };
        let _one_at_a_time = self.reloading.lock();
        // An unreadable file counts as a text too (`None`): a file that
        // stays missing is reported once, not at every poll.
        let last = self.last_text.lock().clone();
        let text = match settled(|| snapshot(&self.engine, path), Some(&last), force) {
            Settled::Unchanged => return Ok(Reloaded::Unchanged),
            Settled::Stable(text) => text,
            Settled::StillChanging => {
                self.counts.record(false);
                let e = ConfigError {
                    file: path.clone(),
                    line: 0,
                    column: 0,
                    message: still_changing_message(),
                };
                tracing::error!(error = %e, "config reload failed; the running config stays");
                return Err(e);
            }
        };
        match self.compile(path, text.as_ref()) {
            Ok((policy, deployment)) => {
                if self.started != deployment {
                    tracing::warn!(
                        "listen, control_listen, upstream, [store], [server] and [envoy] changes take effect at the next restart"
                    );
                }
                self.warn_about_removals(&policy);
                self.engine.replace_policy(policy);
                *self.version.lock() = version_of(text.as_ref());
                *self.last_text.lock() = text;
                self.counts.record(true);
                tracing::info!(file = %path.display(), "config reloaded");
                Ok(Reloaded::Applied)
            }
            Err(e) => {
                // Remember the bad text: it is reported once, not every poll.
                *self.last_text.lock() = text;
                self.counts.record(false);
                tracing::error!(error = %e, "config reload failed; the running config stays");
                Err(e)
            }
        }
    }

    /// The policy and deployment of the text that was read (not of a third
    /// read, which could catch another write).
    fn compile(
        &self,
        path: &Path,
        text: Option<&Snapshot>,
    ) -> Result<(Policy, Deployment), ConfigError> {
        let source = match text {
            Some(t) => Source {
                file: path.to_owned(),
                text: t.config.clone(),
            },
            None => Source::read(path)?,
        };
        let config = source.parse()?;
        // The deployment first: a policy compiled keeps its limits' labels
        // for the life of the process, which a config refused must not.
        let deployment = Deployment::compile(&source, &config)?;
        let running = self.engine.policy();
        Ok((
            Policy::compile_replacing(&source, &config, &running)?,
            deployment,
        ))
    }

    /// Names, at WARN, the limits and plans the new policy drops, and counts
    /// them.
    fn warn_about_removals(&self, new: &Policy) {
        let old = self.engine.policy();
        let gone = |old: Vec<&str>, new: Vec<&str>| -> Vec<String> {
            old.into_iter()
                .filter(|n| !new.contains(n))
                .map(str::to_owned)
                .collect()
        };
        fn names(p: &Policy) -> Vec<&str> {
            p.limits().iter().map(|l| &*l.limit.name).collect()
        }
        let limits = gone(names(&old), names(new));
        let plans = gone(old.plan_names().collect(), new.plan_names().collect());
        if !limits.is_empty() || !plans.is_empty() {
            tracing::warn!(
                removed_limits = ?limits,
                removed_plans = ?plans,
                "the reloaded config removes limits or plans"
            );
        }
        self.removed_limits
            .fetch_add(limits.len() as u64, Ordering::Relaxed);
        self.removed_plans
            .fetch_add(plans.len() as u64, Ordering::Relaxed);
    }

    /// The version (hash of the text) of the config in force.
    pub fn version(&self) -> String {
        self.version.lock().clone()
    }

    /// Reloads that applied a new config: of this file, and of the other
    /// configs counted with it.
    pub fn succeeded(&self) -> u64 {
        self.counts.succeeded()
    }

    /// Reloads that failed (the running config stayed): of this file, and
    /// of the other configs counted with it.
    pub fn failed(&self) -> u64 {
        self.counts.failed()
    }

    /// The counts of reloads, to share with the reloaders of the server's
    /// other configs (Envoy's YAML), so that the reload metric counts them
    /// all.
    pub fn counts(&self) -> Arc<ReloadCounts> {
        self.counts.clone()
    }

    /// Limits and plans that reloads removed, in all: `(limits, plans)`.
    pub fn removed(&self) -> (u64, u64) {
        (
            self.removed_limits.load(Ordering::Relaxed),
            self.removed_plans.load(Ordering::Relaxed),
        )
    }
}

/// The texts a reload depends on: the config file's, and its keys file's
/// (named by the policy in force).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    config: String,
    keys: Option<Option<String>>,
}

/// The version of the texts: of the config's, followed by the keys file's.
fn version_of(text: Option<&Snapshot>) -> String {
    let Some(t) = text else {
        return config_version("");
    };
    match &t.keys {
        None => config_version(&t.config),
        Some(keys) => config_version(&format!(
            "{}\0{}",
            t.config,
            keys.as_deref().unwrap_or("\0missing")
        )),
    }
}

/// The texts as they are now. `None` when the config is unreadable.
fn snapshot(engine: &Engine, path: &Path) -> Option<Snapshot> {
    use sluice_policy::file_read::{MAX_CONFIG_BYTES, MAX_KEYS_FILE_BYTES, read_text};
    let config = read_text(path, MAX_CONFIG_BYTES).ok()?;
    let keys = engine
        .policy()
        .keys_file
        .as_ref()
        .map(|keys| read_text(keys, MAX_KEYS_FILE_BYTES).ok());
    Some(Snapshot { config, keys })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An engine of the config at `path`, and its reloader.
    fn loaded(path: &std::path::Path) -> (Arc<Engine>, Reloader) {
        let engine = Arc::new(Engine::new(Policy::load(path).unwrap()));
        let reloader = Reloader::new(
            engine.clone(),
            path.to_owned(),
            Deployment::load(path).unwrap(),
        );
        (engine, reloader)
    }

    #[test]
    fn a_missing_or_broken_file_is_reported_once_and_the_config_stays() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        let good = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\n";
        std::fs::write(&path, good).unwrap();
        let (engine, reloader) = loaded(&path);
        assert_eq!(reloader.reload(false).unwrap(), Reloaded::Unchanged);

        std::fs::remove_file(&path).unwrap();
        assert!(reloader.reload(false).is_err());
        for _ in 0..3 {
            assert_eq!(reloader.reload(false).unwrap(), Reloaded::Unchanged);
        }
        assert_eq!(reloader.failed(), 1, "reported once");

        std::fs::write(&path, "[[limits]]\nname = \"a\"\nrate = \"oops\"\n").unwrap();
        assert!(reloader.reload(false).is_err());
        assert_eq!(reloader.reload(false).unwrap(), Reloaded::Unchanged);
        assert_eq!(reloader.failed(), 2);
        assert_eq!(
            engine.policy().limits()[0].limit.name.as_ref(),
            "a",
            "the old config stays"
        );

        std::fs::write(&path, good.replace("1/s", "2/s")).unwrap();
        assert_eq!(reloader.reload(false).unwrap(), Reloaded::Applied);
        assert_eq!(reloader.succeeded(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_changed_keys_file_reloads() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        std::fs::write(
            &path,
            "[client]\nkey = \"header:K\"\ndefault_plan = \"free\"\nkeys_file = \"keys.csv\"\n\
             [plans.free]\nlimits = [{ rate = \"1/s\" }]\n[plans.pro]\nlimits = [{ rate = \"9/s\" }]\n",
        )
        .unwrap();
        std::fs::write(dir.join("keys.csv"), "alice,free\n").unwrap();
        let (engine, reloader) = loaded(&path);
        assert_eq!(reloader.reload(false).unwrap(), Reloaded::Unchanged);
        std::fs::write(dir.join("keys.csv"), "alice,pro\n").unwrap();
        assert_eq!(reloader.reload(false).unwrap(), Reloaded::Applied);
        assert_eq!(engine.policy().plan_of("alice"), Some("pro"));
        std::fs::write(dir.join("keys.csv"), "alice,gold\n").unwrap();
        assert!(
            reloader.reload(false).is_err(),
            "a bad keys file is refused"
        );
        assert_eq!(
            engine.policy().plan_of("alice"),
            Some("pro"),
            "and the config stays"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
