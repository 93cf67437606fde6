//! Reading every node's eviction policy and evictions, judging the
//! policies, logging what changed, and keeping the last reading for
//! metrics.

use parking_lot::Mutex;
use sluice_store::seam::NodeEviction;

use super::info::{InfoFields, PolicyRisk};
use crate::topology::Topology;

/// A node whose eviction policy can evict Sluice's keys, while
/// `[store] accept_eviction` does not accept it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "Redis node {node} has maxmemory-policy {policy}: when full it evicts keys, Sluice's among them, and a limit whose state is evicted starts full again and admits more than it allows. Set `maxmemory-policy noeviction` on that Redis (or give Sluice a Redis of its own), or set `accept_eviction = true` in [store] to run anyway"
)]
pub struct EvictingPolicy {
    /// The node's address (`host:port`).
    pub node: String,
    /// Its policy, as it names it.
    pub policy: String,
}

/// When a reading is taken: it decides how a policy that can evict is
/// answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Before Sluice serves: the caller refuses to start on the error.
    Start,
    /// While Sluice serves: too late to refuse, so it is logged as an
    /// error.
    Running,
}

/// What one node answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeReading {
    /// The node's address (`host:port`).
    pub node: String,
    /// Its fields, or why `INFO memory` could not be read.
    pub fields: Result<InfoFields, String>,
}

/// Reads `INFO memory` and `INFO stats` of every node `topology` uses.
/// Each command is bounded by the topology's request deadline; a node
/// that does not answer is that node's error.
pub async fn read_nodes(topology: &Topology) -> Vec<NodeReading> {
    let memory = topology.info_of_nodes("memory").await;
    let stats = topology.info_of_nodes("stats").await;
    memory
        .into_iter()
        .map(|(node, text)| {
            let fields = text.map(|text| {
                let mut fields = InfoFields::parse(&text);
                fields.evicted_keys = stats
                    .iter()
                    .find(|(n, _)| *n == node)
                    .and_then(|(_, s)| s.as_ref().ok())
                    .and_then(|s| InfoFields::parse(s).evicted_keys);
                fields
            });
            NodeReading { node, fields }
        })
        .collect()
}

/// The last reading of every node, and what it said. Cheap to read.
#[derive(Debug, Default)]
pub struct EvictionWatch {
    nodes: Mutex<Vec<NodeEviction>>,
}

impl EvictionWatch {
    /// What each node said at the last reading, in the order read.
    pub fn nodes(&self) -> Vec<NodeEviction> {
        self.nodes.lock().clone()
    }

    /// Keeps `readings` as the last reading and logs each node whose
    /// policy is new or changed since the one before (every node, at the
    /// first): a warning for a policy that can evict and is accepted, or
    /// that is unknown; while running, an error for one that can evict and
    /// is not accepted. A node whose policy cannot be read keeps what was
    /// last read of it (an outage is not news here); one never read is
    /// logged as a warning. Returns the first node whose policy can evict,
    /// unless `accept`.
    pub fn record(
        &self,
        readings: Vec<NodeReading>,
        accept: bool,
        phase: Phase,
    ) -> Result<(), EvictingPolicy> {
        let mut nodes = self.nodes.lock();
        let mut refused = None;
        let mut next = Vec::with_capacity(readings.len());
        for reading in readings {
            let before = nodes.iter().find(|n| n.node == reading.node);
            let read = reading.fields.as_ref().ok();
            let Some(policy) = read.and_then(|f| f.policy.clone()) else {
                next.push(before.cloned().unwrap_or_else(|| {
                    log_unreadable(&reading);
                    NodeEviction {
                        node: reading.node.clone(),
                        policy: None,
                        evicted_keys: read.and_then(|f| f.evicted_keys),
                    }
                }));
                continue;
            };
            let changed = before.is_none_or(|b| b.policy.as_ref() != Some(&policy));
            if PolicyRisk::of(&policy) == PolicyRisk::Evicts {
                let evicting = EvictingPolicy {
                    node: reading.node.clone(),
                    policy: policy.clone(),
                };
                if changed {
                    log_evicting(&evicting, accept, phase);
                }
                if !accept && refused.is_none() {
                    refused = Some(evicting);
                }
            } else if changed {
                log_other(&reading.node, &policy, before.is_some());
            }
            next.push(NodeEviction {
                node: reading.node,
                policy: Some(policy),
                evicted_keys: read.and_then(|f| f.evicted_keys),
            });
        }
        *nodes = next;
        refused.map_or(Ok(()), Err)
    }
}

/// A policy that can evict: accepted (a warning), or found while running
/// (an error: too late to refuse). At start, not accepted, the caller
/// reports it.
fn log_evicting(e: &EvictingPolicy, accept: bool, phase: Phase) {
    if accept {
        tracing::warn!(
            node = %e.node,
            policy = %e.policy,
            "Redis maxmemory-policy {} can evict Sluice's keys (accepted by [store] accept_eviction): a limit whose state is evicted starts full again and admits more than it allows",
            e.policy
        );
    } else if phase == Phase::Running {
        tracing::error!(node = %e.node, policy = %e.policy, "{e}");
    }
}

/// A policy that keeps every key, or one this version does not know.
fn log_other(node: &str, policy: &str, seen_before: bool) {
    match PolicyRisk::of(policy) {
        PolicyRisk::Keeps if seen_before => tracing::info!(
            %node,
            %policy,
            "Redis maxmemory-policy is {policy}: Sluice's keys are not evicted"
        ),
        PolicyRisk::Keeps | PolicyRisk::Evicts => {}
        PolicyRisk::Unknown => tracing::warn!(
            %node,
            %policy,
            "Redis maxmemory-policy {policy} is unknown to this version of Sluice: it may evict Sluice's keys"
        ),
    }
}

/// A node whose policy could not be read: said, never fatal.
fn log_unreadable(reading: &NodeReading) {
    let why = match &reading.fields {
        Ok(_) => "INFO memory has no readable maxmemory_policy",
        Err(e) => e.as_str(),
    };
    tracing::warn!(
        node = %reading.node,
        error = %why,
        "cannot read Redis's maxmemory-policy: Sluice cannot tell whether Redis may evict its keys"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(node: &str, policy: Option<&str>, evicted: Option<u64>) -> NodeReading {
        NodeReading {
            node: node.into(),
            fields: Ok(InfoFields {
                policy: policy.map(Into::into),
                evicted_keys: evicted,
            }),
        }
    }

    #[test]
    fn an_evicting_policy_is_refused_unless_accepted() {
        let watch = EvictionWatch::default();
        let readings = vec![
            reading("a:1", Some("noeviction"), Some(0)),
            reading("b:2", Some("volatile-ttl"), Some(5)),
        ];
        let refused = watch
            .record(readings.clone(), false, Phase::Start)
            .unwrap_err();
        assert_eq!(refused.node, "b:2");
        assert_eq!(refused.policy, "volatile-ttl");
        assert!(refused.to_string().contains("maxmemory-policy"));
        assert!(watch.record(readings, true, Phase::Start).is_ok());
        let nodes = watch.nodes();
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].evicted_keys, Some(5));
    }

    #[test]
    fn an_unreadable_or_unknown_policy_is_not_refused() {
        let watch = EvictionWatch::default();
        let readings = vec![
            NodeReading {
                node: "a:1".into(),
                fields: Err("NOPERM this user has no permissions".into()),
            },
            reading("b:2", None, None),
            reading("c:3", Some("something-new"), None),
        ];
        assert!(watch.record(readings, false, Phase::Start).is_ok());
        let nodes = watch.nodes();
        assert_eq!(nodes[0].policy, None);
        assert_eq!(nodes[2].policy.as_deref(), Some("something-new"));
    }

    #[test]
    fn a_node_that_stops_answering_keeps_its_last_reading() {
        let watch = EvictionWatch::default();
        let first = vec![reading("a:1", Some("allkeys-lru"), Some(7))];
        watch.record(first, true, Phase::Start).unwrap();
        let down = vec![NodeReading {
            node: "a:1".into(),
            fields: Err("connection refused".into()),
        }];
        watch.record(down, true, Phase::Running).unwrap();
        let nodes = watch.nodes();
        assert_eq!(nodes[0].policy.as_deref(), Some("allkeys-lru"));
        assert_eq!(nodes[0].evicted_keys, Some(7));
    }

    #[test]
    fn each_reading_replaces_the_last() {
        let watch = EvictionWatch::default();
        let first = vec![reading("a:1", Some("noeviction"), Some(1))];
        watch.record(first, false, Phase::Start).unwrap();
        let second = vec![reading("b:2", Some("allkeys-lru"), Some(9))];
        assert!(watch.record(second, false, Phase::Running).is_err());
        let nodes = watch.nodes();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].node, "b:2");
    }
}
