//! One Redis node behind an auto-reconnecting multiplexed connection.
//!
//! A [`ConnectionManager`] pipelines the commands of every clone over one
//! connection and, when that connection breaks, reconnects in the
//! background with bounded exponential backoff (see [`TopologyOptions`]).
//! Commands issued while it reconnects wait for the new connection; the
//! [`Route`](super::Route) deadline bounds that wait.

use redis::aio::ConnectionManager;

use super::TopologyOptions;
use crate::RedisStoreError;
use crate::url::{Connect as _, NodeAddr};

/// Connects to `node`. One direct attempt first, so that an unreachable or
/// misconfigured node (refused, wrong password) is reported at once with
/// its own error instead of after a whole reconnect burst.
pub(crate) async fn connect_node(
    node: &NodeAddr,
    options: &TopologyOptions,
) -> Result<ConnectionManager, RedisStoreError> {
    let client = node.client()?;
    let deadline = options.request_deadline();
    let probe = tokio::time::timeout(
        deadline,
        client.get_multiplexed_async_connection_with_config(&options.connection_config()),
    )
    .await
    .map_err(|_| RedisStoreError::Timeout(deadline))??;
    drop(probe);
    tokio::time::timeout(
        deadline,
        ConnectionManager::new_with_config(client, options.manager_config()),
    )
    .await
    .map_err(|_| RedisStoreError::Timeout(deadline))?
    .map_err(RedisStoreError::from)
}

/// An auto-reconnecting connection that connects on first use.
pub(crate) fn lazy_node(
    client: redis::Client,
    options: &TopologyOptions,
) -> Result<ConnectionManager, RedisStoreError> {
    Ok(ConnectionManager::new_lazy_with_config(
        client,
        options.manager_config(),
    )?)
}
