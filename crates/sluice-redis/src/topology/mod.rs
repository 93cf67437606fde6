//! Connections to the Redis nodes a store URL names, and routing: which
//! node holds a given key.
//!
//! | URL | connections | [`Topology::route`] | [`Topology::node_of`] |
//! |---|---|---|---|
//! | single node | one auto-reconnecting multiplexed connection (`single.rs`) | that connection | `Some(0)` |
//! | Cluster | redis-rs's cluster client (`cluster.rs`) | the cluster connection (it routes by slot, follows `MOVED`/`ASK`) | `None` |
//! | shards | one connection per node (`shards.rs`) | the node the consistent-hash [`ring`] picks | `Some(node)` |
//! | Sentinel | the current master (`sentinel.rs`), re-resolved on failover | the master | `Some(0)` |
//!
//! Every request through a [`Route`] is bounded by
//! [`TopologyOptions::request_deadline`] (waiting for a reconnection
//! included), so a Redis outage turns into prompt errors, never a hang.

mod cluster;
mod node_info;
pub mod options;
pub mod ring;
mod sentinel;
mod shards;
mod single;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;

use crate::{RedisStoreError, StoreUrl};

pub use node_info::NodeInfo;
pub use options::TopologyOptions;

use self::sentinel::SentinelMaster;
use self::shards::Shards;

/// Connections to a Redis deployment. Cheap to clone; clones share the
/// connections.
#[derive(Clone)]
pub struct Topology {
    kind: Kind,
    deadline: Duration,
}

#[derive(Clone)]
enum Kind {
    Single {
        conn: ConnectionManager,
        db: i64,
        /// `host:port`, for what is said about the node.
        name: String,
    },
    Cluster(ClusterConnection),
    Shards {
        shards: Arc<Shards>,
        db: i64,
    },
    Sentinel(SentinelMaster),
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("Topology");
        match &self.kind {
            Kind::Single { db, name, .. } => s
                .field("kind", &"single")
                .field("node", name)
                .field("db", db),
            Kind::Cluster(_) => s.field("kind", &"cluster"),
            Kind::Shards { shards, db } => s
                .field("kind", &"shards")
                .field("shards", shards)
                .field("db", db),
            Kind::Sentinel(m) => s.field("kind", &"sentinel").field("master", m),
        };
        s.field("deadline", &self.deadline).finish()
    }
}

/// A connection to the node that serves one routing key. Cheap to clone;
/// commands on clones are pipelined over the same multiplexed connection.
#[derive(Clone)]
pub struct Route {
    conn: RouteConn,
    deadline: Duration,
}

#[derive(Clone)]
enum RouteConn {
    Node {
        conn: ConnectionManager,
        db: i64,
    },
    Cluster(ClusterConnection),
    Sentinel(SentinelMaster),
    /// No node can serve this route (an empty shard list).
    Nowhere,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.conn {
            RouteConn::Node { .. } => "node",
            RouteConn::Cluster(_) => "cluster",
            RouteConn::Sentinel(_) => "sentinel",
            RouteConn::Nowhere => "nowhere",
        };
        f.debug_struct("Route")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl Topology {
    /// Connects to the deployment `url` names, with default
    /// [`TopologyOptions`].
    pub async fn connect(url: &StoreUrl) -> Result<Self, RedisStoreError> {
        Self::connect_with(url, &TopologyOptions::default()).await
    }

    /// Connects to the deployment `url` names. Fails if a node (every shard,
    /// a cluster seed, a Sentinel and its master) cannot be reached now.
    pub async fn connect_with(
        url: &StoreUrl,
        options: &TopologyOptions,
    ) -> Result<Self, RedisStoreError> {
        let kind = match url {
            StoreUrl::Single(node) => Kind::Single {
                conn: single::connect_node(node, options).await?,
                db: node.db,
                name: node.to_string(),
            },
            StoreUrl::Cluster(seeds) => {
                Kind::Cluster(cluster::connect_cluster(seeds, options).await?)
            }
            StoreUrl::Shards(nodes) => Kind::Shards {
                shards: Arc::new(Shards::connect(nodes, options).await?),
                db: nodes.first().map_or(0, |n| n.db),
            },
            StoreUrl::Sentinel {
                sentinels,
                master,
                master_auth,
            } => Kind::Sentinel(
                SentinelMaster::connect(sentinels, master, master_auth, options).await?,
            ),
        };
        Ok(Self {
            kind,
            deadline: options.request_deadline(),
        })
    }

    /// The connection for keys whose hash tag is `tag` (the text between
    /// `{` and `}` of the Redis key name). Costs a reference-count increment
    /// (plus, for shards, one hash and a binary search).
    pub fn route(&self, tag: &str) -> Route {
        let conn = match &self.kind {
            Kind::Single { conn, db, .. } => RouteConn::Node {
                conn: conn.clone(),
                db: *db,
            },
            Kind::Cluster(conn) => RouteConn::Cluster(conn.clone()),
            Kind::Shards { shards, db } => match shards.route(tag) {
                Some(conn) => RouteConn::Node {
                    conn: conn.clone(),
                    db: *db,
                },
                None => RouteConn::Nowhere,
            },
            Kind::Sentinel(master) => RouteConn::Sentinel(master.clone()),
        };
        Route {
            conn,
            deadline: self.deadline,
        }
    }

    /// Which node serves `tag`: keys with the same node index may share one
    /// script call. In Cluster mode this is `None`: only keys of one hash
    /// slot may share a call, and Redis decides where slots live.
    pub fn node_of(&self, tag: &str) -> Option<usize> {
        match &self.kind {
            Kind::Single { .. } | Kind::Sentinel(_) => Some(0),
            Kind::Cluster(_) => None,
            Kind::Shards { shards, .. } => Some(shards.node_of(tag)),
        }
    }

    /// For Sentinel, the address of the master in use now; `None` for other
    /// topologies.
    pub fn sentinel_master(&self) -> Option<(String, u16)> {
        match &self.kind {
            Kind::Sentinel(master) => Some(master.master_addr()),
            _ => None,
        }
    }
}

/// The error a request gets when it runs past its deadline.
fn deadline_error(deadline: Duration) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("redis did not answer within {deadline:?}"),
    ))
}

/// The error a request gets when no node can serve it.
fn nowhere_error() -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::InvalidClientConfig,
        "no Redis node configured for this key",
    ))
}

impl ConnectionLike for Route {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        let deadline = self.deadline;
        Box::pin(async move {
            let request = async {
                match &mut self.conn {
                    RouteConn::Node { conn, .. } => conn.send_packed_command(cmd).await,
                    RouteConn::Cluster(conn) => conn.req_packed_command(cmd).await,
                    RouteConn::Sentinel(master) => master.send(cmd).await,
                    RouteConn::Nowhere => Err(nowhere_error()),
                }
            };
            tokio::time::timeout(deadline, request)
                .await
                .unwrap_or_else(|_| Err(deadline_error(deadline)))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        let deadline = self.deadline;
        Box::pin(async move {
            let request = async {
                match &mut self.conn {
                    RouteConn::Node { conn, .. } => {
                        conn.send_packed_commands(cmd, offset, count).await
                    }
                    RouteConn::Cluster(conn) => conn.req_packed_commands(cmd, offset, count).await,
                    RouteConn::Sentinel(master) => master.send_pipeline(cmd, offset, count).await,
                    RouteConn::Nowhere => Err(nowhere_error()),
                }
            };
            tokio::time::timeout(deadline, request)
                .await
                .unwrap_or_else(|_| Err(deadline_error(deadline)))
        })
    }

    fn get_db(&self) -> i64 {
        match &self.conn {
            RouteConn::Node { db, .. } => *db,
            RouteConn::Sentinel(master) => master.db(),
            RouteConn::Cluster(_) | RouteConn::Nowhere => 0,
        }
    }
}
