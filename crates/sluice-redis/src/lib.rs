//! Sluice's shared store: per-key limiter state in Redis, so that many
//! instances of a service enforce one global limit.
//!
//! - [`url`]: the store URLs (`redis://`, `rediss://`, `redis+cluster://`,
//!   `redis+shards://`, `redis+sentinel://`).
//! - [`topology`]: connections to the nodes a URL names, and which node
//!   holds a key.
//! - [`store`]: [`RedisStore`], all-or-nothing decisions over several limits
//!   in one atomic Lua step, on Redis's own clock.
//! - [`shared`]: [`SharedStore`], Redis as the engine uses it: behind a
//!   timeout, a [`breaker`], an [`over_limit`] cache and a fallback (the
//!   [`local`] one enforces each instance's share in memory).
//! - [`runtime_state`]: [`RuntimeState`], runtime plan assignments and
//!   burst credits shared by every instance, and the watcher that keeps
//!   each instance's copy current.

pub mod breaker;
pub mod error;
pub mod ledger;
pub mod local;
pub mod over_limit;
pub mod runtime_state;
pub mod shared;
pub mod store;
pub mod topology;
pub mod url;

mod batch;
mod script;

pub use batch::BatchConfig;
pub use error::RedisStoreError;
pub use runtime_state::{RuntimeSink, RuntimeState};
pub use shared::{DecidedBy, Fallback, SharedCheck, SharedChecked, SharedOptions, SharedStore};
pub use store::{RedisCheck, RedisStore, key_name};
pub use url::StoreUrl;
