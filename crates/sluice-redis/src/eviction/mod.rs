//! Whether Redis may evict Sluice's keys, and how many keys it has evicted.
//!
//! A Redis shared with a cache (`maxmemory` with an `allkeys-*` policy, or
//! a `volatile-*` one: every Sluice key has a TTL) drops keys when it is
//! full. A limit whose key is dropped starts full again, so it admits more
//! than it allows, and neither the breaker nor the fallback sees it: Redis
//! answered. So Sluice reads each node's `maxmemory_policy` (`INFO memory`:
//! managed Redis often forbids `CONFIG`) and `evicted_keys` (`INFO stats`)
//! at start and then periodically, on every node it uses
//! ([`Topology::info_of_nodes`]):
//!
//! - at start, a policy that can evict refuses the start
//!   ([`EvictingPolicy`]) unless `[store] accept_eviction` accepts it,
//!   which logs a warning instead;
//! - while running, a policy that changed is logged (an error when it can
//!   evict and was not accepted: Sluice cannot refuse to start any more);
//! - a node whose policy cannot be read is logged as a warning, and never
//!   stops Sluice;
//! - what was read goes to metrics through the protection's health
//!   ([`EvictionWatch::nodes`]).
//!
//! [`Topology::info_of_nodes`]: crate::topology::Topology::info_of_nodes

mod info;
mod watch;

pub use info::{InfoFields, PolicyRisk};
pub use watch::{EvictingPolicy, EvictionWatch, NodeReading, Phase, read_nodes};

/// The shortest interval between two readings, whatever is configured.
pub const MIN_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);
