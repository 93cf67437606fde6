//! A real Redis Cluster built from plain `redis-server` processes.
//!
//! Every node runs with `--cluster-enabled yes`, its own cluster config file
//! in a temporary directory and an explicit bus port (`--cluster-port`, so
//! that `port + 10000` need not be free). The cluster is assembled by hand,
//! as `redis-cli --cluster create` would: distinct config epochs, an equal
//! share of the 16384 slots per primary (`CLUSTER ADDSLOTSRANGE`), then
//! `CLUSTER MEET`, then `CLUSTER REPLICATE` for the replicas, if any.
//!
//! For fault tests: [`RedisCluster::failover`] (a manual failover, `CLUSTER
//! FAILOVER` on a replica), [`RedisCluster::kill`] (SIGKILL, as a crash),
//! [`RedisCluster::reshard`] (`redis-cli --cluster reshard`), and bounded
//! waits until the cluster agrees again.

use std::path::PathBuf;
use std::time::Duration;

use crate::redis_server::{RedisServer, free_port};
use crate::resp::{self, Reply};

/// How long the nodes may take to agree that the cluster is up.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// The number of hash slots.
pub const SLOTS: u16 = 16384;

/// Every node's `cluster-node-timeout`: how long a node may be unreachable
/// before the others mark it failed and its replica takes over.
pub const NODE_TIMEOUT_MS: u64 = 2000;

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
        Self::start_with_replicas(n, 0)
    }

    /// Starts `masters` (at least 1) primaries sharing the slots equally,
    /// each with `replicas_per_master` replicas, and waits until every node
    /// reports `cluster_state:ok` and every replica is in sync with its
    /// master.
    ///
    /// Nodes `0..masters` are the primaries; the replicas of primary `m` are
    /// nodes `masters + m * replicas_per_master ..` (until a failover
    /// changes the roles: see [`Self::is_master`]). Every node runs with
    /// `cluster-node-timeout` 2000 ms, so a killed primary's replica takes
    /// over within a few seconds.
    pub fn start_with_replicas(masters: usize, replicas_per_master: usize) -> Self {
        assert!(masters >= 1, "a cluster needs a node");
        let n = masters * (1 + replicas_per_master);
        let dir = std::env::temp_dir().join(format!(
            "sluice-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let (nodes, buses) = start_nodes(&dir, n);
        let cluster = Self {
            nodes,
            bus: buses,
            dir,
        };
        let m32 = masters as u32;
        for i in 0..n {
            cluster.expect_ok(i, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
        }
        for i in 0..masters {
            let first = (i as u32 * u32::from(SLOTS) / m32).to_string();
            let last = ((i as u32 + 1) * u32::from(SLOTS) / m32 - 1).to_string();
            cluster.expect_ok(i, &["CLUSTER", "ADDSLOTSRANGE", &first, &last]);
        }
        for i in 1..n {
            let port = cluster.nodes[i].port().to_string();
            let bus = cluster.bus[i].to_string();
            cluster.expect_ok(0, &["CLUSTER", "MEET", "127.0.0.1", &port, &bus]);
        }
        let known = format!("cluster_known_nodes:{n}");
        if replicas_per_master > 0 {
            // A replica can only follow a master it knows.
            cluster.wait_until("every node knows every other", |c| {
                (0..c.len()).all(|i| c.info(i).contains(&known))
            });
            for m in 0..masters {
                let id = cluster.node_id(m);
                for r in 0..replicas_per_master {
                    let replica = masters + m * replicas_per_master + r;
                    cluster.expect_ok(replica, &["CLUSTER", "REPLICATE", &id]);
                }
            }
        }
        let size = format!("cluster_size:{masters}");
        cluster.wait_until("the cluster is up", |c| {
            (0..c.len()).all(|i| {
                let info = c.info(i);
                info.contains("cluster_state:ok")
                    && info.contains(&known)
                    && info.contains(&size)
                    && info.contains("cluster_slots_ok:16384")
            })
        });
        cluster.wait_until("every replica is in sync", |c| {
            (masters..c.len()).all(|i| c.replication(i).contains("master_link_status:up"))
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
        let asked = self.live().next().expect("a live node");
        match self.command(asked, &["CLUSTER", "KEYSLOT", key]) {
            Reply::Int(slot) => u16::try_from(slot).unwrap_or_else(|_| panic!("slot {slot}")),
            other => panic!("CLUSTER KEYSLOT: {other:?}"),
        }
    }

    /// Which node owns `slot`, as node `asked` sees it.
    pub fn owner_of(&self, slot: u16, asked: usize) -> Option<usize> {
        self.slot_map(asked)
            .into_iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .and_then(|(_, _, owner)| owner)
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

    /// Whether node `i` runs (it has not been [killed](Self::kill)).
    pub fn is_alive(&self, i: usize) -> bool {
        self.nodes[i].pid().is_some()
    }

    /// The nodes that run.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter(|&i| self.is_alive(i))
    }

    fn replication(&self, i: usize) -> String {
        self.text(i, &["INFO", "replication"])
    }

    /// Whether node `i` is a primary now.
    pub fn is_master(&self, i: usize) -> bool {
        self.replication(i).contains("role:master")
    }

    /// The primary node `i` replicates, when it is a replica.
    pub fn master_of(&self, i: usize) -> Option<usize> {
        let info = self.replication(i);
        if !info.contains("role:slave") {
            return None;
        }
        let port: u16 = info
            .lines()
            .find_map(|l| l.strip_prefix("master_port:"))?
            .trim()
            .parse()
            .ok()?;
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// The live replicas of primary `m`.
    pub fn replicas_of(&self, m: usize) -> Vec<usize> {
        self.live()
            .filter(|&i| i != m && self.master_of(i) == Some(m))
            .collect()
    }

    /// The slot map as node `asked` sees it (`CLUSTER SLOTS`): each range's
    /// first and last slot and its primary, in slot order.
    pub fn slot_map(&self, asked: usize) -> Vec<(u16, u16, Option<usize>)> {
        let Reply::Array(Some(ranges)) = self.command(asked, &["CLUSTER", "SLOTS"]) else {
            return Vec::new();
        };
        let mut map: Vec<(u16, u16, Option<usize>)> = ranges
            .iter()
            .filter_map(|range| {
                let Reply::Array(Some(items)) = range else {
                    return None;
                };
                let (
                    Some(Reply::Int(first)),
                    Some(Reply::Int(last)),
                    Some(Reply::Array(Some(primary))),
                ) = (items.first(), items.get(1), items.get(2))
                else {
                    return None;
                };
                let owner = match primary.get(1) {
                    Some(Reply::Int(port)) => {
                        self.nodes.iter().position(|n| i64::from(n.port()) == *port)
                    }
                    _ => None,
                };
                Some((
                    u16::try_from(*first).ok()?,
                    u16::try_from(*last).ok()?,
                    owner,
                ))
            })
            .collect();
        map.sort_unstable();
        map
    }

    /// The slot ranges primary `m` owns, as node `asked` sees them.
    pub fn slots_of(&self, m: usize, asked: usize) -> Vec<(u16, u16)> {
        self.slot_map(asked)
            .into_iter()
            .filter(|(_, _, owner)| *owner == Some(m))
            .map(|(first, last, _)| (first, last))
            .collect()
    }

    /// Whether every live node reports `cluster_state:ok` and they all see
    /// one slot map that covers every slot, each range owned by a live
    /// primary.
    pub fn is_healthy(&self) -> bool {
        let live: Vec<usize> = self.live().collect();
        let Some(&first) = live.first() else {
            return false;
        };
        let map = self.slot_map(first);
        let covered: u32 = map
            .iter()
            .map(|(a, b, _)| u32::from(*b) - u32::from(*a) + 1)
            .sum();
        covered == u32::from(SLOTS)
            && map
                .iter()
                .all(|(_, _, owner)| owner.is_some_and(|o| self.is_alive(o)))
            && live.iter().all(|&i| {
                let info = self.info(i);
                info.contains("cluster_state:ok") && self.slot_map(i) == map
            })
    }

    /// Waits (at most 30 s) until the cluster [is healthy](Self::is_healthy).
    pub fn wait_healthy(&self) {
        self.wait_until("the cluster is healthy", Self::is_healthy);
    }

    /// A manual failover (`CLUSTER FAILOVER` on `replica`): the replica
    /// waits until it has caught up with its primary, then takes its slots;
    /// the old primary becomes its replica. Waits until every live node
    /// sees the replica own them.
    pub fn failover(&self, replica: usize) {
        let master = self
            .master_of(replica)
            .unwrap_or_else(|| panic!("node {replica} is not a replica"));
        let slots = self.slots_of(master, replica);
        assert!(!slots.is_empty(), "node {master} owns no slots");
        self.expect_ok(replica, &["CLUSTER", "FAILOVER"]);
        self.wait_until("the replica has taken over", |c| {
            c.is_master(replica)
                && c.live().all(|i| {
                    slots
                        .iter()
                        .all(|(first, _)| c.owner_of(*first, i) == Some(replica))
                })
        });
        self.wait_healthy();
    }

    /// Kills node `i` (SIGKILL), as a crash would. Its replica, if it was a
    /// primary with one, takes over after about
    /// [`NODE_TIMEOUT_MS`] and an election.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Starts killed node `i` again on its port and cluster config file: it
    /// rejoins (empty), as a replica if its slots were taken over.
    pub fn restart(&mut self, i: usize) {
        self.nodes[i].restart();
    }

    /// Moves `slots` slots from primary `from` to primary `to` with
    /// `redis-cli --cluster reshard` (the lowest-numbered slots of `from`
    /// first, each with its keys), then waits until the cluster is healthy.
    /// Returns what redis-cli printed; panics if it fails.
    pub fn reshard(&self, from: usize, to: usize, slots: u16) -> String {
        let seed = format!("127.0.0.1:{}", self.nodes[to].port());
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let out = std::process::Command::new("redis-cli")
            .args(["--cluster", "reshard", &seed])
            .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
            .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run redis-cli: {e}"));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            out.status.success() && !text.contains("[ERR]"),
            "redis-cli --cluster reshard failed ({}):\n{text}",
            out.status
        );
        self.wait_healthy();
        text
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

/// `n` cluster-enabled nodes, their configs in `dir`: the servers and their
/// cluster bus ports.
fn start_nodes(dir: &std::path::Path, n: usize) -> (Vec<RedisServer>, Vec<u16>) {
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
                &NODE_TIMEOUT_MS.to_string(),
            ],
        ));
    }
    (nodes, buses)
}
