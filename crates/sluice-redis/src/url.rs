//! Store URLs: which Redis deployment holds the limiter state.
//!
//! (Stub: to be filled in. The shape below is the agreed interface.)

use crate::RedisStoreError;

/// One Redis node's address and credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// Host name or IP.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Whether to use TLS (`rediss://`).
    pub tls: bool,
    /// ACL user name, if any.
    pub username: Option<String>,
    /// Password, if any (from the URL or the environment). Never printed.
    pub password: Option<String>,
    /// Database number (single node and shards only).
    pub db: i64,
}

impl std::fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAddr")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `redis://host:port/db` or `rediss://…`: one node.
    Single(NodeAddr),
    /// `redis+cluster://h1:p1,h2:p2`: Redis Cluster, seeded by these nodes.
    Cluster(Vec<NodeAddr>),
    /// `redis+shards://h1:p1,h2:p2`: independent nodes, keys spread by
    /// consistent hashing.
    Shards(Vec<NodeAddr>),
    /// `redis+sentinel://s1:p1,s2:p2/master-name`: the master that these
    /// Sentinels name.
    Sentinel {
        /// The Sentinels.
        sentinels: Vec<NodeAddr>,
        /// The monitored master's name.
        master: String,
    },
}

impl std::str::FromStr for StoreUrl {
    type Err = RedisStoreError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Err(RedisStoreError::BadUrl {
            url: s.to_owned(),
            reason: "not implemented yet".into(),
        })
    }
}

impl std::fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}
