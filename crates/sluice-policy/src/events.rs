//! Account-manager events, resolved from `[plans.<name>] alert` and
//! `[events]`: which plans raise an event when one of their keys keeps
//! hitting its ceiling, and where the events go.

use std::collections::BTreeMap;

use sluice_core::Nanos;

use crate::ConfigError;
use crate::config::{Config, Source};

/// When a plan's key raises an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlertRule {
    /// Refusals within one window that trigger the event (it fires on the
    /// refusal after this many).
    pub limited: u64,
    /// The window, in nanoseconds (clock-aligned).
    pub window: Nanos,
}

/// Every plan's alert rule and the webhook.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventSettings {
    /// Alert rules by plan name.
    pub rules: BTreeMap<String, AlertRule>,
    /// Where events are POSTed as JSON, if anywhere.
    pub webhook: Option<http::Uri>,
    /// Attempts per event before it is dropped.
    pub attempts: u32,
    /// Events waiting to be posted, at most.
    pub queue: usize,
}

impl EventSettings {
    /// Resolves the config, pointing errors at the offending field.
    pub fn from_config(source: &Source, config: &Config) -> Result<Self, ConfigError> {
        let mut rules = BTreeMap::new();
        for (plan, pc) in &config.plans {
            let Some(alert) = &pc.alert else { continue };
            let a = alert.get_ref();
            if a.limited == 0 {
                return Err(source.error_at(
                    Some(alert.span()),
                    format!("plans.{plan}.alert.limited: must be at least 1"),
                ));
            }
            let window = sluice_core::parse_duration(a.window.get_ref()).map_err(|e| {
                source.error_at(
                    Some(a.window.span()),
                    format!("plans.{plan}.alert.window: `{}`: {e}", a.window.get_ref()),
                )
            })?;
            rules.insert(
                plan.clone(),
                AlertRule {
                    limited: a.limited,
                    window,
                },
            );
        }
        let webhook = match &config.events.webhook {
            None => None,
            Some(w) => {
                let uri: http::Uri = w
                    .get_ref()
                    .parse()
                    .map_err(|e| source.error_at(Some(w.span()), format!("events.webhook: {e}")))?;
                if uri.scheme_str() != Some("http") || uri.authority().is_none() {
                    return Err(source.error_at(
                        Some(w.span()),
                        "events.webhook: expected an http://host:port/path URL",
                    ));
                }
                Some(uri)
            }
        };
        Ok(Self {
            rules,
            webhook,
            attempts: config.events.attempts.unwrap_or(3).max(1),
            queue: config.events.queue.unwrap_or(1000).max(1),
        })
    }
}
