//! `[store]`, resolved: where the limits' state lives and how the shared
//! store degrades.

use std::time::Duration;

use sluice_store::seam::{Fallback, ProtectOptions};
use sluice_store_url::StoreUrl;

use crate::ConfigError;
use crate::config::{FallbackConfig, Source, StoreConfig};

/// Where the limits' state lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    /// The shared store, or `None` for the embedded memory store.
    pub url: Option<StoreUrl>,
    /// How the shared store's protection behaves (ignored for the memory
    /// store).
    pub shared: ProtectOptions,
    /// Whether concurrent decisions share script calls on the shared store.
    pub batch: bool,
    /// The most keys the memory store tracks, per limit.
    pub max_keys: usize,
    /// Whether the shared store may run on nodes that can evict its keys
    /// (`accept_eviction`); otherwise such a node refuses the start.
    pub accept_eviction: bool,
    /// How often the shared store's nodes are asked again whether they may
    /// evict keys, and how many they have evicted.
    pub eviction_check_interval: Duration,
}

/// How often the shared store's nodes are asked about eviction, unless
/// `eviction_check_interval` says otherwise.
pub const DEFAULT_EVICTION_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// The shortest `eviction_check_interval` accepted.
pub const MIN_EVICTION_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// Parses a store URL: `None` for `memory://`.
pub fn parse_store_url(text: &str) -> Result<Option<StoreUrl>, String> {
    if text.trim() == "memory://" {
        return Ok(None);
    }
    text.trim()
        .parse::<StoreUrl>()
        .map(Some)
        .map_err(|e| e.to_string())
}

impl StoreSettings {
    /// Resolves `[store]`, pointing errors at the offending field.
    pub fn from_config(source: &Source, store: &StoreConfig) -> Result<Self, ConfigError> {
        let url = parse_store_url(store.url.get_ref()).map_err(|e| {
            let span = store.url.span();
            source.error_at(
                (!span.is_empty()).then_some(span),
                format!("store.url: {e}"),
            )
        })?;
        let duration = |field: &Option<toml::Spanned<String>>, name: &str, default: Duration| {
            let Some(text) = field else {
                return Ok(default);
            };
            sluice_core::parse_duration(text.get_ref())
                .map(Duration::from_nanos)
                .map_err(|e| {
                    source.error_at(
                        Some(text.span()),
                        format!("store.{name}: `{}`: {e}", text.get_ref()),
                    )
                })
        };
        let defaults = ProtectOptions::default();
        let shared = ProtectOptions {
            timeout: duration(&store.timeout, "timeout", defaults.timeout)?,
            fallback: match store.fallback {
                FallbackConfig::Local => Fallback::Local,
                FallbackConfig::Allow => Fallback::Allow,
                FallbackConfig::Deny => Fallback::Deny,
            },
            expected_instances: store.expected_instances.max(1),
            breaker_failures: store.breaker_failures.max(1),
            breaker_open: duration(&store.breaker_open, "breaker_open", defaults.breaker_open)?,
            over_limit_cache: store.over_limit_cache,
            local_max_keys: store.max_keys,
        };
        let eviction_check_interval = duration(
            &store.eviction_check_interval,
            "eviction_check_interval",
            DEFAULT_EVICTION_CHECK_INTERVAL,
        )?;
        if eviction_check_interval < MIN_EVICTION_CHECK_INTERVAL
            && let Some(text) = &store.eviction_check_interval
        {
            return Err(source.error_at(
                Some(text.span()),
                format!(
                    "store.eviction_check_interval: `{}` is shorter than {MIN_EVICTION_CHECK_INTERVAL:?}",
                    text.get_ref()
                ),
            ));
        }
        Ok(Self {
            url,
            shared,
            batch: store.batch,
            max_keys: store.max_keys,
            accept_eviction: store.accept_eviction,
            eviction_check_interval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Deployment;

    fn store(lines: &str) -> Result<StoreSettings, ConfigError> {
        let text = format!("no_limits = true\n[store]\nurl = \"redis://127.0.0.1:6379\"\n{lines}");
        Deployment::from_toml("s.toml", &text).map(|d| d.store)
    }

    #[test]
    fn eviction_is_refused_and_checked_every_30s_by_default() {
        let s = store("").unwrap();
        assert!(!s.accept_eviction);
        assert_eq!(s.eviction_check_interval, DEFAULT_EVICTION_CHECK_INTERVAL);
        let s = store("accept_eviction = true\neviction_check_interval = \"2m\"\n").unwrap();
        assert!(s.accept_eviction);
        assert_eq!(s.eviction_check_interval, Duration::from_secs(120));
    }

    #[test]
    fn a_too_short_eviction_check_interval_is_refused() {
        let e = store("eviction_check_interval = \"10ms\"\n").unwrap_err();
        assert!(
            e.to_string().contains("store.eviction_check_interval"),
            "{e}"
        );
        let e = store("eviction_check_interval = \"soon\"\n").unwrap_err();
        assert!(
            e.to_string().contains("store.eviction_check_interval"),
            "{e}"
        );
    }
}
