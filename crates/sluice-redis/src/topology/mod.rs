//! Connections to the Redis nodes a store URL names, and routing: which
//! node holds a given key.
//!
//! (Stub: to be filled in. The shape below is the agreed interface.)

use redis::aio::ConnectionLike;

use crate::{RedisStoreError, StoreUrl};

/// Connections to a Redis deployment.
#[derive(Clone)]
pub struct Topology {
    _private: (),
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Topology").finish_non_exhaustive()
    }
}

/// A connection to the node that serves one routing key. Cheap to clone;
/// commands on clones are pipelined over the same multiplexed connection.
#[derive(Clone)]
pub struct Route {
    _private: (),
}

impl Topology {
    /// Connects to the deployment `url` names.
    pub async fn connect(url: &StoreUrl) -> Result<Self, RedisStoreError> {
        let _ = url;
        Err(RedisStoreError::BadReply("not implemented yet".into()))
    }

    /// The connection for keys whose hash tag is `tag` (the text between
    /// `{` and `}` of the Redis key name).
    pub fn route(&self, tag: &str) -> Route {
        let _ = tag;
        Route { _private: () }
    }

    /// Which node serves `tag`: keys with the same node index may share one
    /// script call. In Cluster mode this is `None`: only keys of one hash
    /// slot may share a call, and Redis decides where slots live.
    pub fn node_of(&self, tag: &str) -> Option<usize> {
        let _ = tag;
        Some(0)
    }
}

impl ConnectionLike for Route {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let _ = cmd;
        Box::pin(async {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "not implemented yet",
            )))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let _ = (cmd, offset, count);
        Box::pin(async {
            Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "not implemented yet",
            )))
        })
    }

    fn get_db(&self) -> i64 {
        0
    }
}
