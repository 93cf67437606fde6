//! Assembling a single-node, Cluster or Shards URL from its parts.

use super::Parts;
use super::path::parse_db_path;
use crate::StoreUrl;

/// `redis://`: exactly one node, an optional `/<db>`.
pub(super) fn single(parts: Parts<'_>) -> Result<StoreUrl, String> {
    let Parts {
        scheme,
        login,
        mut hosts,
        segments,
        ..
    } = parts;
    if hosts.len() != 1 {
        return Err(format!(
            "{scheme}:// names one node, this URL names {}: use redis+cluster://, \
             redis+shards:// or redis+sentinel:// for several",
            hosts.len()
        ));
    }
    let db = parse_db_path(&segments)?;
    let host = hosts.remove(0);
    Ok(StoreUrl::Single(login.node(host, db)))
}

/// `redis+cluster://`: the seed nodes, no path (Redis Cluster has only
/// database 0).
pub(super) fn cluster(parts: Parts<'_>) -> Result<StoreUrl, String> {
    let Parts {
        login,
        hosts,
        segments,
        ..
    } = parts;
    if !segments.is_empty() {
        return Err("Redis Cluster has only database 0: remove the path after the hosts".into());
    }
    Ok(StoreUrl::Cluster(
        hosts.into_iter().map(|h| login.node(h, 0)).collect(),
    ))
}

/// `redis+shards://`: the nodes, an optional `/<db>` that all of them use.
pub(super) fn shards(parts: Parts<'_>) -> Result<StoreUrl, String> {
    let Parts {
        login,
        hosts,
        segments,
        ..
    } = parts;
    let db = parse_db_path(&segments)?;
    Ok(StoreUrl::Shards(
        hosts.into_iter().map(|h| login.node(h, db)).collect(),
    ))
}
