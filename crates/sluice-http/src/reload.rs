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

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use sluice_policy::{ConfigError, Engine, Policy};

/// Reloads one config file into one engine.
#[derive(Debug)]
pub struct Reloader {
    engine: Arc<Engine>,
    path: PathBuf,
    last_text: Mutex<Option<String>>,
    succeeded: AtomicU64,
    failed: AtomicU64,
    /// `sluice serve --store-url`: replaces every loaded config's store URL.
    store_url: Option<Option<sluice_redis::StoreUrl>>,
    /// The hash of the config text in force.
    version: Mutex<String>,
}

/// A short, stable hash of a config's text: its version.
pub fn config_version(text: &str) -> String {
    format!(
        "{:08x}",
        sluice_redis::shared::fnv1a(text.as_bytes()) as u32
    )
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
    /// A reloader for `engine`, whose config was loaded from `path`.
    pub fn new(engine: Arc<Engine>, path: PathBuf) -> Self {
        let text = snapshot(&engine, &path);
        Self {
            engine,
            path,
            version: Mutex::new(config_version(text.as_deref().unwrap_or(""))),
            last_text: Mutex::new(text),
            succeeded: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            store_url: None,
        }
    }

    /// Applies a `--store-url` override to every reloaded config (`None`
    /// inside: the memory store).
    pub fn with_store_url(mut self, url: Option<sluice_redis::StoreUrl>) -> Self {
        self.store_url = Some(url);
        self
    }

    /// Reloads the file if its text changed (or always, with `force`).
    pub fn reload(&self, force: bool) -> Result<Reloaded, ConfigError> {
        // An unreadable file counts as a text too (`None`): a file that
        // stays missing is reported once, not at every poll.
        let text = snapshot(&self.engine, &self.path);
        if !force && *self.last_text.lock() == text {
            return Ok(Reloaded::Unchanged);
        }
        match Policy::load(&self.path) {
            Ok(mut policy) => {
                if let Some(url) = &self.store_url {
                    policy.store.url = url.clone();
                }
                self.warn_about_restart_only_changes(&policy);
                self.engine.replace_policy(policy);
                *self.version.lock() = config_version(text.as_deref().unwrap_or(""));
                *self.last_text.lock() = text;
                self.succeeded.fetch_add(1, Ordering::Relaxed);
                tracing::info!(file = %self.path.display(), "config reloaded");
                Ok(Reloaded::Applied)
            }
            Err(e) => {
                // Remember the bad text: it is reported once, not every poll.
                *self.last_text.lock() = text;
                self.failed.fetch_add(1, Ordering::Relaxed);
                tracing::error!(error = %e, "config reload failed; the running config stays");
                Err(e)
            }
        }
    }

    fn warn_about_restart_only_changes(&self, new: &Policy) {
        let old = self.engine.policy();
        if old.listen != new.listen
            || old.control_listen != new.control_listen
            || old.upstream != new.upstream
            || old.envoy != new.envoy
            || old.store != new.store
        {
            tracing::warn!(
                "listen, control_listen, upstream, [store] and [envoy] changes take effect at the next restart"
            );
        }
    }

    /// The version (hash of the text) of the config in force.
    pub fn version(&self) -> String {
        self.version.lock().clone()
    }

    /// Reloads that applied a new config.
    pub fn succeeded(&self) -> u64 {
        self.succeeded.load(Ordering::Relaxed)
    }

    /// Reloads that failed (the running config stayed).
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// The text a reload depends on: the config file's, and its keys file's
/// (named by the policy in force). `None` when the config is unreadable.
fn snapshot(engine: &Engine, path: &std::path::Path) -> Option<String> {
    let mut text = std::fs::read_to_string(path).ok()?;
    if let Some(keys) = &engine.policy().keys_file {
        text.push('\0');
        match std::fs::read_to_string(keys) {
            Ok(k) => text.push_str(&k),
            Err(_) => text.push_str("\0missing"),
        }
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_broken_file_is_reported_once_and_the_config_stays() {
        let dir = std::env::temp_dir().join(format!("sluice-reload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sluice.toml");
        let good = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\n";
        std::fs::write(&path, good).unwrap();
        let engine = Arc::new(Engine::new(Policy::load(&path).unwrap()));
        let reloader = Reloader::new(engine.clone(), path.clone());
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
            engine.policy().limits()[0].name.as_ref(),
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
        let engine = Arc::new(Engine::new(Policy::load(&path).unwrap()));
        let reloader = Reloader::new(engine.clone(), path.clone());
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
