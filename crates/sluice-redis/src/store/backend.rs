//! Where a hash tag's keys live: the store's backend (a topology, or one
//! plain connection) and a connection to one node.

use redis::aio::{ConnectionLike, MultiplexedConnection};

use crate::topology::{Route, Topology};

/// A connection to one node: a topology route, or a plain connection.
#[derive(Clone)]
pub(crate) enum Conn {
    Route(Route),
    Direct(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Route(c) => c.req_packed_command(cmd),
            Self::Direct(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Route(c) => c.req_packed_commands(cmd, offset, count),
            Self::Direct(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Route(c) => c.get_db(),
            Self::Direct(c) => c.get_db(),
        }
    }
}

/// The nodes a store talks to.
pub(super) enum Backend {
    Topology(Topology),
    Direct(MultiplexedConnection),
    /// One connection, but every hash tag treated as its own Cluster slot
    /// (tests of the commit-in-turn path).
    PerTag(MultiplexedConnection),
}

impl Backend {
    /// The node holding keys tagged `tag`; `None` when each tag is decided
    /// on its own (Redis Cluster slots, or [`Backend::PerTag`]).
    pub(super) fn node_of(&self, tag: &str) -> Option<usize> {
        match self {
            Self::Topology(t) => t.node_of(tag),
            Self::Direct(_) => Some(0),
            Self::PerTag(_) => None,
        }
    }

    /// The topology, unless this is one plain connection (tests).
    pub(super) fn topology(&self) -> Option<&Topology> {
        match self {
            Self::Topology(t) => Some(t),
            Self::Direct(_) | Self::PerTag(_) => None,
        }
    }

    /// A connection to the node holding keys tagged `tag`.
    pub(super) fn conn(&self, tag: &str) -> Conn {
        match self {
            Self::Topology(t) => Conn::Route(t.route(tag)),
            Self::Direct(c) | Self::PerTag(c) => Conn::Direct(c.clone()),
        }
    }
}
