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
}

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
        Ok(Self {
            url,
            shared,
            batch: store.batch,
            max_keys: store.max_keys,
        })
    }
}
