//! A real Sentinel deployment: one master, one replica and three
//! Sentinels (quorum 2), all on loopback ports, all killed on drop.
//!
//! The Sentinels run `redis-server <conf> --sentinel` (what the
//! `redis-sentinel` command is) with `down-after-milliseconds` 500 (unless
//! [`SentinelSetup::start_with_down_after`] says otherwise) and
//! `failover-timeout` 3000, so a killed master is replaced within seconds.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::redis_server::{RedisServer, free_port};
use crate::resp::{self, Reply};

/// The Sentinels' `down-after-milliseconds` unless told otherwise.
const DOWN_AFTER: Duration = Duration::from_millis(500);

/// How long the deployment may take to settle (replica in sync, Sentinels
/// aware of each other). Sentinels learn of the replica from the master's INFO (every 10 s) and
/// of each other from hello messages; on a loaded CI machine this once took
/// over 30 s. A readiness wait, not a timing assertion.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// One Sentinel process, killed on drop.
#[derive(Debug)]
pub struct RedisSentinel {
    child: Option<Child>,
    port: u16,
}

impl RedisSentinel {
    fn start(dir: &std::path::Path, name: &str, master_port: u16, down_after: Duration) -> Self {
        let port = free_port();
        let conf = dir.join(format!("sentinel-{port}.conf"));
        let text = format!(
            "port {port}\n\
             bind 127.0.0.1\n\
             dir {dir}\n\
             sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
             sentinel down-after-milliseconds {name} {down_after}\n\
             sentinel failover-timeout {name} 3000\n\
             sentinel parallel-syncs {name} 1\n",
            dir = dir.display(),
            down_after = down_after.as_millis()
        );
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("{}: {e}", conf.display()));
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server --sentinel: {e}"));
        Self {
            child: Some(child),
            port,
        }
    }

    /// The Sentinel's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Sends one command to this Sentinel.
    pub fn command(&self, args: &[&str]) -> std::io::Result<Reply> {
        resp::command(
            std::net::SocketAddr::from(([127, 0, 0, 1], self.port)),
            args,
        )
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A master, its replica and three Sentinels watching them.
#[derive(Debug)]
pub struct SentinelSetup {
    sentinels: Vec<RedisSentinel>,
    master: RedisServer,
    replica: RedisServer,
    name: String,
    dir: PathBuf,
}

impl SentinelSetup {
    /// Starts the deployment with the master named `name` and waits until
    /// the replica is in sync and every Sentinel knows the replica and the
    /// other two Sentinels (needed to agree on a failover).
    pub fn start(name: &str) -> Self {
        Self::start_with_down_after(name, DOWN_AFTER)
    }

    /// Like [`Self::start`], with the Sentinels' `down-after-milliseconds`
    /// at `down_after`: how long the master may fail to answer before a
    /// failover (a longer one lets a test block the master without one).
    pub fn start_with_down_after(name: &str, down_after: Duration) -> Self {
        let master = RedisServer::start();
        let mport = master.port().to_string();
        let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &mport]);
        let dir = std::env::temp_dir().join(format!(
            "sluice-sentinel-{}-{}",
            std::process::id(),
            master.port()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let sentinels = (0..3)
            .map(|_| RedisSentinel::start(&dir, name, master.port(), down_after))
            .collect();
        let setup = Self {
            sentinels,
            master,
            replica,
            name: name.to_owned(),
            dir,
        };
        setup.wait_until("the replica is in sync", |s| {
            s.replica
                .command(&["INFO", "replication"])
                .is_ok_and(|info| info.contains("master_link_status:up"))
        });
        setup.wait_until("every Sentinel knows the replica and its peers", |s| {
            s.sentinels.iter().all(|sentinel| {
                let count = |sub: &str| match sentinel.command(&["SENTINEL", sub, &s.name]) {
                    Ok(Reply::Array(Some(items))) => items.len(),
                    _ => 0,
                };
                count("replicas") >= 1 && count("sentinels") >= 2
            })
        });
        setup
    }

    /// `redis+sentinel://127.0.0.1:S1,…/name`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect();
        format!("redis+sentinel://{}/{}", hosts.join(","), self.name)
    }

    /// The master being monitored.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server that started as the master.
    pub fn master(&self) -> &RedisServer {
        &self.master
    }

    /// The server that started as the replica.
    pub fn replica(&self) -> &RedisServer {
        &self.replica
    }

    /// The Sentinels.
    pub fn sentinels(&self) -> &[RedisSentinel] {
        &self.sentinels
    }

    /// Kills the initial master (SIGKILL); the Sentinels will promote the
    /// replica after `down-after-milliseconds` and an election.
    pub fn kill_master(&mut self) {
        self.master.kill();
    }

    /// Kills the initial replica (SIGKILL): with it dead, a failover has
    /// no replica to promote.
    pub fn kill_replica(&mut self) {
        self.replica.kill();
    }

    /// Starts the initial master again on its port, empty (after
    /// [`Self::kill_master`]).
    pub fn restart_master(&mut self) {
        self.master.restart();
    }

    /// Asks a Sentinel for a failover now (`SENTINEL FAILOVER`), without
    /// waiting for the master to fail: the replica is promoted and the old
    /// master demoted to a replica.
    pub fn force_failover(&self) {
        let reply = self.sentinels[0]
            .command(&["SENTINEL", "FAILOVER", &self.name])
            .unwrap_or_else(|e| panic!("SENTINEL FAILOVER: {e}"));
        assert!(reply.is_ok(), "SENTINEL FAILOVER: {reply:?}");
    }

    /// The master's port according to Sentinel `i`.
    pub fn master_port_seen_by(&self, i: usize) -> Option<u16> {
        match self.sentinels[i].command(&["SENTINEL", "get-master-addr-by-name", &self.name]) {
            Ok(Reply::Array(Some(items))) => items.get(1)?.text()?.parse().ok(),
            _ => None,
        }
    }

    fn wait_until(&self, what: &str, done: impl Fn(&Self) -> bool) {
        crate::redis_server::wait_until(what, READY_TIMEOUT, || done(self));
    }
}

impl Drop for SentinelSetup {
    fn drop(&mut self) {
        self.sentinels.clear();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
