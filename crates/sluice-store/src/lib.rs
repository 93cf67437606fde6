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
//! let key = KeyHasher::random().key_id("per-key", "alice");
//! let decisions = store.check(&[Check { limiter: &limiter, key, cost: 1 }]).unwrap();
//! assert!(decisions.allowed);
//! assert_eq!(decisions.decisions[0].remaining, 19);
//! ```

mod key;
mod memory;

pub use key::{KeyHasher, KeyId};
pub use memory::{Check, Checked, MemoryStore, MemoryStoreConfig};
