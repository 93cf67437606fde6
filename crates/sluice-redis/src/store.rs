//! The Redis store: all-or-nothing decisions over several limits in one
//! atomic Lua step on Redis's own clock.
//!
//! (Stub: to be filled in. The shape below is the agreed interface.)

use sluice_core::Limiter;
use sluice_store::{Checked, KeyId};

use crate::RedisStoreError;
use crate::topology::Topology;

/// One limit to check for one client key.
#[derive(Debug, Clone, Copy)]
pub struct RedisCheck<'a> {
    /// A stable identity of the limit's definition (its name, algorithm,
    /// rate and burst): a changed definition gets fresh counters.
    pub limit_id: &'a str,
    /// The limit's algorithm and parameters.
    pub limiter: &'a Limiter,
    /// The client key's keyed hash; the raw key never reaches Redis.
    pub key: KeyId,
    /// The request's cost.
    pub cost: u64,
}

/// Limiter state in Redis.
#[derive(Debug, Clone)]
pub struct RedisStore {
    topology: Topology,
}

impl RedisStore {
    /// A store over connected nodes.
    pub fn new(topology: Topology) -> Self {
        Self { topology }
    }

    /// Decides every check together: all are charged, or none.
    pub async fn check(&self, checks: &[RedisCheck<'_>]) -> Result<Checked, RedisStoreError> {
        let _ = (checks, &self.topology);
        Err(RedisStoreError::BadReply("not implemented yet".into()))
    }
}
