//! What a store reports about itself, for metrics and the status page.

/// A circuit breaker's state, for metrics and logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakerState {
    /// Calls go to the store.
    #[default]
    Closed,
    /// The store is considered down; the fallback decides.
    Open,
    /// One probe call is testing the store.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open => "open",
            Self::HalfOpen => "half_open",
        }
    }
}

/// How a store that can fail is doing: what it decided, and how its
/// protection (breaker, cache, fallback) stands. Counts are since start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteHealth {
    /// The store's address, without any password.
    pub address: String,
    /// Whether the store has been reached since the process started (its
    /// client is set up; it may have gone down since: see
    /// [`breaker`](Self::breaker)).
    pub connected: bool,
    /// The breaker's state: `Open` means the fallback is deciding.
    pub breaker: BreakerState,
    /// The fallback that decides while the store cannot.
    pub fallback: super::Fallback,
    /// Decisions made by the store.
    pub store_decisions: u64,
    /// Calls that failed with an error.
    pub store_errors: u64,
    /// Calls that timed out.
    pub store_timeouts: u64,
    /// Refusals answered by the over-limit cache.
    pub cache_hits: u64,
    /// Decisions made by the fallback.
    pub fallback_decisions: u64,
    /// (limit, key) pairs whose fallback admissions the store has not been
    /// charged for yet.
    pub owed_pairs: usize,
    /// Cost charged to the store since for what the fallback admitted.
    pub owed_settled: u64,
    /// Pairs dropped because the ledger of what is owed was full.
    pub owed_dropped: u64,
    /// How many limits the local fallback holds a share of.
    pub local_limits: usize,
    /// What each of the store's nodes last said about evicting keys, in
    /// the order the store reads them; empty until one has been read.
    pub nodes: Vec<NodeEviction>,
}

/// What one node of a store over the network last said about evicting
/// keys under memory pressure. A store shared with a cache may evict the
/// limits' state, and a limit whose state is evicted starts full again:
/// it admits more than it allows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeEviction {
    /// The node's address (`host:port`), without any password.
    pub node: String,
    /// The node's eviction policy as it names it (Redis's
    /// `maxmemory_policy`, e.g. `noeviction`, `allkeys-lru`); `None` when
    /// it could not be read.
    pub policy: Option<String>,
    /// Keys the node has evicted since it started (Redis's
    /// `evicted_keys`); `None` when it could not be read.
    pub evicted_keys: Option<u64>,
}
