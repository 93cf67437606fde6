//! Independent Redis nodes with keys spread over them by consistent
//! hashing of the hash tag (see [`Ring`]).
//!
//! There is no replication or rebalancing between shards: adding a shard
//! moves about 1/N of the tags to it, and those tags start from fresh
//! limiter state there (their old state expires on the old node).

use redis::aio::ConnectionManager;

use super::TopologyOptions;
use super::ring::Ring;
use super::single::connect_node;
use crate::RedisStoreError;
use crate::url::NodeAddr;

/// Shards and the ring that spreads tags over them.
pub(crate) struct Shards {
    ring: Ring,
    /// `host:port` of each node, in URL order.
    names: Vec<String>,
    nodes: Vec<ConnectionManager>,
}

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shards")
            .field("nodes", &self.names)
            .field("ring", &self.ring)
            .finish()
    }
}

impl Shards {
    /// Connects to every node; fails if any node is unreachable, since a
    /// missing shard would silently send its tags nowhere.
    pub(crate) async fn connect(
        nodes: &[NodeAddr],
        options: &TopologyOptions,
    ) -> Result<Self, RedisStoreError> {
        let names: Vec<String> = nodes.iter().map(NodeAddr::to_string).collect();
        let mut conns = Vec::with_capacity(nodes.len());
        for node in nodes {
            conns.push(connect_node(node, options).await?);
        }
        Ok(Self {
            ring: Ring::new(&names),
            names,
            nodes: conns,
        })
    }

    /// The index of the node serving `tag`.
    pub(crate) fn node_of(&self, tag: &str) -> usize {
        self.ring.node(tag)
    }

    /// Every node, as (`host:port`, connection), in URL order.
    pub(crate) fn nodes(&self) -> impl Iterator<Item = (&str, &ConnectionManager)> {
        self.names.iter().map(String::as_str).zip(&self.nodes)
    }

    /// The connection to the node serving `tag`.
    pub(crate) fn route(&self, tag: &str) -> Option<&ConnectionManager> {
        self.nodes.get(self.ring.node(tag))
    }
}
