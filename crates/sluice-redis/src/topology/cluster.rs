//! Redis Cluster through redis-rs's asynchronous cluster client.
//!
//! The client learns the slot map from the seeds, sends each command to the
//! node owning its key's slot, follows `MOVED` (and refreshes the slot map)
//! and `ASK` redirections, and reconnects to nodes that went away. All keys
//! of one script call must share a slot, which Sluice's key names ensure
//! with a `{tag}`.

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;

use super::TopologyOptions;
use crate::RedisStoreError;
use crate::url::{Connect, NodeAddr};

/// Connects to the cluster these seeds belong to.
pub(crate) async fn connect_cluster(
    seeds: &[NodeAddr],
    options: &TopologyOptions,
) -> Result<ClusterConnection, RedisStoreError> {
    let seeds = seeds
        .iter()
        .map(Connect::connection_info)
        .collect::<Result<Vec<_>, _>>()?;
    let client = ClusterClientBuilder::new(seeds)
        // The connections to the nodes it discovers take their socket
        // options from here, not from the seeds.
        .tcp_settings(crate::url::tcp_settings())
        .connection_timeout(options.connect_timeout)
        .response_timeout(options.response_timeout)
        // Redirections and reconnections share one request budget.
        .overall_response_timeout(Some(options.request_deadline()))
        .build()?;
    let deadline = options.request_deadline();
    tokio::time::timeout(deadline, client.get_async_connection())
        .await
        .map_err(|_| RedisStoreError::Timeout(deadline))?
        .map_err(RedisStoreError::from)
}
