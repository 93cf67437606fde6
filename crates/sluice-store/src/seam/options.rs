//! How a store over the network degrades: its timeout, breaker and
//! fallback. The config resolves them; the protection
//! (`sluice_protect::Protected`) applies them.

use std::time::Duration;

use super::Fallback;

/// How a protected remote store behaves (`sluice_protect::Protected`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtectOptions {
    /// The longest a decision waits for the remote store.
    pub timeout: Duration,
    /// Who decides while the remote store cannot.
    pub fallback: Fallback,
    /// How many instances share the limits: the local fallback admits
    /// `1/expected_instances` of each.
    pub expected_instances: u32,
    /// Failures in a row that open the breaker.
    pub breaker_failures: u32,
    /// How long the breaker stays open before it probes.
    pub breaker_open: Duration,
    /// Whether refused requests are cached until their retry time.
    pub over_limit_cache: bool,
    /// The most keys the local fallback tracks per limit, and the most
    /// (limit, key) pairs the ledger of what it admitted holds.
    pub local_max_keys: usize,
}

impl Default for ProtectOptions {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(10),
            fallback: Fallback::Local,
            expected_instances: 1,
            breaker_failures: 3,
            breaker_open: Duration::from_millis(500),
            over_limit_cache: true,
            local_max_keys: 100_000,
        }
    }
}
