//! # sluice-store
//!
//! Stores hold the per-key state of Sluice's limiters and do the I/O; the
//! algorithms in `sluice-core` only compute. This crate has the embedded
//! default, [`MemoryStore`]: concurrent, sharded, bounded in memory, and
//! all-or-nothing across the several limits one request meets.
//!
//! ```
//! use sluice_core::{AlgorithmKind, LimitSpec, Rate};
//! use sluice_store::{Check, KeyHasher, MemoryStore};
//!
//! let limiter = LimitSpec {
//!     algorithm: AlgorithmKind::TokenBucket,
//!     rate: Rate::per_second(10),
//!     burst: 20,
//!     nodelay: false,
//! }
//! .build()
//! .unwrap();
//! let store = MemoryStore::new(Default::default());
//! let per_key = store.limit("per-key", limiter);
//! let key = KeyHasher::random().key_id("alice");
//! let d = store.check_one(&Check { limit: &per_key, key, cost: 1 }).unwrap();
//! assert!(d.allowed);
//! assert_eq!(d.remaining, 19);
//! ```

mod atomic_gcra;
mod atomic_table;
mod direct;
mod key;
mod keyed;
mod leases;
mod limit;
mod memory;
mod memory_leases;
mod memory_runtime;
mod memory_seam;
pub mod seam;
mod sync;
mod table;
mod tag;

pub use direct::DirectLimiter;
pub use key::{KeyHasher, KeyId};
pub use keyed::KeyedLimiter;
pub use limit::Limit;
pub use memory::{Check, Checked, MemoryStore, MemoryStoreConfig};
pub use memory_runtime::MemoryRuntime;
pub use table::Table;
pub use tag::{fnv1a, limit_tag};
