//! Sluice's shared store: per-key limiter state in Redis, so that many
//! instances of a service enforce one global limit.
//!
//! - [`url`]: the store URLs (`redis://`, `rediss://`, `redis+cluster://`,
//!   `redis+shards://`, `redis+sentinel://`).
//! - [`topology`]: connections to the nodes a URL names, and which node
//!   holds a key.
//! - [`store`]: [`RedisStore`], all-or-nothing decisions over several limits
//!   in one atomic Lua step, on Redis's own clock.
//! - [`remote`]: [`RedisRemote`], Redis as a
//!   [`Remote`](sluice_protect::Remote) store, connected in the background,
//!   for [`Protected`](sluice_protect::Protected) to wrap ([`shared`]).
//! - [`runtime_state`]: [`RuntimeState`], runtime plan assignments and
//!   burst credits shared by every instance, and the watcher that keeps
//!   each instance's copy current.
//! - [`eviction`]: whether Redis may evict Sluice's keys (its
//!   `maxmemory-policy`), read at start and periodically, and how many
//!   keys it has evicted.

pub mod error;
pub mod eviction;
pub mod remote;
mod runtime_seam;
pub mod runtime_state;
pub mod store;
pub mod topology;
pub mod url;

mod batch;
mod script;

use std::sync::Arc;

pub use batch::BatchConfig;
pub use error::RedisStoreError;
pub use remote::RedisRemote;
pub use runtime_state::{RuntimeSink, RuntimeState};
pub use sluice_protect::{ProtectOptions, RemoteError};
pub use store::{RedisCheck, RedisStore, key_name};
pub use url::StoreUrl;

/// Redis behind its protection: the shared store as the engine uses it.
pub type SharedStore = sluice_protect::Protected<RedisRemote>;

/// The shared store for `url`: Redis (connected in the background) behind
/// a timeout, a breaker, an over-limit cache and a fallback; `batch`:
/// whether concurrent decisions share script calls. Must be called within
/// a tokio runtime.
pub fn shared(
    url: StoreUrl,
    batch: bool,
    opts: sluice_protect::ProtectOptions,
) -> Arc<SharedStore> {
    sluice_protect::Protected::start(RedisRemote::new(url, batch), opts)
}
