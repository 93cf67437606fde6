//! A real Redis Cluster built from plain `redis-server` processes.
//!
//! Every node runs with `--cluster-enabled yes`, its own cluster config file
//! in a temporary directory and an explicit bus port (`--cluster-port`, so
//! that `port + 10000` need not be free). The cluster is assembled by hand,
//! as `redis-cli --cluster create` would: distinct config epochs, an equal
//! share of the 16384 slots per node (`CLUSTER ADDSLOTSRANGE`), then
//! `CLUSTER MEET`. No replicas.

use std::path::PathBuf;
use std::time::Duration;

use crate::redis_server::{RedisServer, free_port};
use crate::resp::{self, Reply};

/// How long the nodes may take to agree that the cluster is up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// A running cluster of primaries, killed on drop.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// The cluster bus port of each node.
    bus: Vec<u16>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts `n` (at least 1) primaries sharing the slots equally and waits
    /// until every node reports `cluster_state:ok`.
    pub fn start(n: usize) -> Self {
        assert!(n >= 1, "a cluster needs a node");
        let dir = std::env::temp_dir().join(format!(
            "sluice-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut nodes = Vec::with_capacity(n);
        let mut buses = Vec::with_capacity(n);
        for _ in 0..n {
            let port = free_port();
            let bus = loop {
                let bus = free_port();
                if bus != port {
                    break bus;
                }
            };
            buses.push(bus);
            let conf = dir.join(format!("nodes-{port}.conf"));
            nodes.push(RedisServer::start_on(
                port,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf.to_string_lossy(),
                    "--cluster-port",
                    &bus.to_string(),
                    "--cluster-node-timeout",
                    "2000",
                ],
            ));
        }
        let cluster = Self {
            nodes,
            bus: buses,
            dir,
        };
        let n16 = n as u32;
        for (i, _) in cluster.nodes.iter().enumerate() {
            let first = (i as u32 * u32::from(SLOTS) / n16).to_string();
            let last = ((i as u32 + 1) * u32::from(SLOTS) / n16 - 1).to_string();
            cluster.expect_ok(i, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
            cluster.expect_ok(i, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        }
        for i in 1..n {
            let port = cluster.nodes[i].port().to_string();
            let bus = cluster.bus[i].to_string();
            cluster.expect_ok(0, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        }
        cluster.wait_until("the cluster is up", |c| {
            (0..c.len()).all(|i| {
                let info = c.info(i);
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", c.len()))
                    && info.contains("cluster_slots_ok:16384")
            })
        });
        cluster
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the cluster has no nodes (never: `start` needs one).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Node `i`.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,…`.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// Sends one command to node `i`.
    pub fn command(&self, i: usize, args: &[&str]) -> Reply {
        resp::command(self.nodes[i].addr(), args)
            .unwrap_or_else(|e| panic!("node {i}: {args:?}: {e}"))
    }

    fn expect_ok(&self, i: usize, args: &[&str]) {
        let reply = self.command(i, args);
        assert!(reply.is_ok(), "node {i}: {args:?}: {reply:?}");
    }

    fn text(&self, i: usize, args: &[&str]) -> String {
        match self.command(i, args) {
            Reply::Simple(s) | Reply::Bulk(Some(s)) => s,
            other => panic!("node {i}: {args:?}: {other:?}"),
        }
    }

    fn info(&self, i: usize) -> String {
        self.text(i, &["CLUSTER", "INFO"])
    }

    /// Node `i`'s cluster id.
    pub fn node_id(&self, i: usize) -> String {
        self.text(i, &["CLUSTER", "MYID"])
    }

    /// The hash slot of `key`.
    pub fn keyslot(&self, key: &str) -> u16 {
        match self.command(0, &["CLUSTER", "KEYSLOT", key]) {
            Reply::Int(slot) => u16::try_from(slot).unwrap_or_else(|_| panic!("slot {slot}")),
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        }
    }

    /// Which node owns `slot`, as node `asked` sees it.
    pub fn owner_of(&self, slot: u16, asked: usize) -> Option<usize> {
        let Reply::Array(Some(ranges)) = self.command(asked, &["CLUSTER", "SLOTS"]) else {
            return None;
        };
        for range in ranges {
            let Reply::Array(Some(items)) = range else {
                continue;
            };
            let (
                Some(Reply::Int(first)),
                Some(Reply::Int(last)),
                Some(Reply::Array(Some(primary))),
            ) = (items.first(), items.get(1), items.get(2))
            else {
                continue;
            };
            if (*first..=*last).contains(&i64::from(slot)) {
                let Some(Reply::Int(port)) = primary.get(1) else {
                    return None;
                };
                return self.nodes.iter().position(|n| i64::from(n.port()) == *port);
            }
        }
        None
    }

    /// Moves `slot` (and its keys) to node `to`, the way
    /// `redis-cli --cluster reshard` does: IMPORTING/MIGRATING, `MIGRATE`
    /// of every key, then `SETSLOT … NODE` on every node. Waits until every
    /// node agrees on the new owner. Clients keep their old slot map and
    /// get `MOVED` on their next command for the slot.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let from = self
            .owner_of(slot, to)
            .unwrap_or_else(|| panic!("slot {slot} has no owner"));
        if from == to {
            return;
        }
        let slot_s = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        self.expect_ok(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]);
        self.expect_ok(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]);
        let to_port = self.nodes[to].port().to_string();
        loop {
            let Reply::Array(Some(keys)) =
                self.command(from, &["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"])
            else {
                panic!("GETKEYSINSLOT failed");
            };
            if keys.is_empty() {
                break;
            }
            let keys: Vec<String> = keys
                .iter()
                .filter_map(|k| k.text().map(str::to_owned))
                .collect();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let reply = self.command(from, &args);
            assert!(reply.is_ok(), "MIGRATE: {reply:?}");
        }
        for i in std::iter::once(to)
            .chain(std::iter::once(from))
            .chain((0..self.len()).filter(|&i| i != to && i != from))
        {
            self.expect_ok(i, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        }
        self.wait_until("every node sees the new slot owner", |c| {
            (0..c.len()).all(|i| c.owner_of(slot, i) == Some(to))
        });
    }

    fn wait_until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        crate::redis_server::wait_until(what, READY_TIMEOUT, || done(self));
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        self.nodes.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
