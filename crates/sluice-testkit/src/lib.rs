//! Test support for Sluice's own tests: real Redis processes on loopback
//! ports, stopped when dropped, so a failing test leaks nothing.
//!
//! Nothing here is mocked: the tests talk to Debian's `redis-server`,
//! `redis-sentinel` and a Redis Cluster built from plain `redis-server`
//! processes. When the binaries are missing, [`redis_available`] says so;
//! tests skip then, unless `SLUICE_REQUIRE_REDIS` is set (as `scripts/test`
//! does), in which case they fail.
//!
//! [`NetNs`] is a network namespace of the test's own, for packet loss
//! between the test and a server inside it (root and `nft` needed; tests
//! skip without them unless `SLUICE_REQUIRE_NETNS` is set).

pub mod netns;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod resp;

pub use netns::{NetNs, require_netns};
pub use redis_cluster::RedisCluster;
pub use redis_sentinel::{RedisSentinel, SentinelSetup};
pub use redis_server::{RedisServer, free_port, redis_available, require_redis};
