//! Whether the shared store's nodes may evict the limits' state, and how
//! many keys they have evicted, as each node last said (read periodically
//! by the store; see `[store] eviction_check_interval`).

use prometheus_client::encoding::DescriptorEncoder;
use sluice_store::seam::NodeEviction;

use super::const_series::{counter, gauge};

/// `sluice_redis_maxmemory_policy` (1 per node, labelled with its policy)
/// and `sluice_redis_evicted_keys_total` (each node's own count of evicted
/// keys since it started, as last read: it resets when the node restarts).
/// A node whose policy or count could not be read has no series.
pub(super) fn encode_eviction(
    encoder: &mut DescriptorEncoder,
    nodes: &[NodeEviction],
) -> Result<(), std::fmt::Error> {
    let policies: Vec<(Vec<(String, String)>, i64)> = nodes
        .iter()
        .filter_map(|n| {
            let policy = n.policy.as_ref()?;
            Some((
                vec![
                    ("node".to_owned(), n.node.clone()),
                    ("policy".to_owned(), policy.clone()),
                ],
                1,
            ))
        })
        .collect();
    gauge(
        encoder,
        "sluice_redis_maxmemory_policy",
        "Each Redis node's maxmemory-policy, as last read (1); any but noeviction can evict the limits' state",
        &policies,
    )?;
    let evicted: Vec<([(&str, &str); 1], u64)> = nodes
        .iter()
        .filter_map(|n| Some(([("node", n.node.as_str())], n.evicted_keys?)))
        .collect();
    let series: Vec<(&[(&str, &str)], u64)> = evicted
        .iter()
        .map(|(labels, v)| (labels.as_slice(), *v))
        .collect();
    counter(
        encoder,
        "sluice_redis_evicted_keys",
        "Keys each Redis node has evicted since it started (its INFO evicted_keys, as last read; any key, not only Sluice's)",
        &series,
    )
}
