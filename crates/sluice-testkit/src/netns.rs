//! A network namespace of the test's own, joined to the host by a veth
//! pair in a private /30 (`10.213.x.y`), for faults on the network between
//! a client on the host and a server inside: packet loss with an nftables
//! rule in the namespace (`numgen random mod 100 < P drop`), which needs no
//! `sch_netem`.
//!
//! Only the two ends of the pair are ever addressed: the host end and the
//! namespace end. The rules live in the namespace and match only its end of
//! the pair, so nothing else on the machine is touched. The namespace (and
//! with it the pair) is deleted on drop, also when a test panics; ones left
//! by a killed test process are deleted by the next [`NetNs::create`].
//!
//! Needs root (`ip netns add`) and `nft` (Debian's `nftables`). When either
//! is missing, [`require_netns`] skips the test, unless
//! `SLUICE_REQUIRE_NETNS` is set (as `scripts/test` does), in which case it
//! fails.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::redis_server::{RedisServer, free_port};

/// The name of every namespace made here starts with this, then the pid.
const PREFIX: &str = "sluice-";

/// The nftables table holding the fault rules, in the namespace.
const TABLE: &str = "sluice_faults";

/// The namespace's end of the pair.
const NS_IF: &str = "veth0";

/// Serialises creation, so that two tests of one process never pick the
/// same addresses.
static CREATE: Mutex<()> = Mutex::new(());

/// A network namespace and its veth pair; deleted on drop.
#[derive(Debug)]
pub struct NetNs {
    name: String,
    host_if: String,
    host_addr: Ipv4Addr,
    ns_addr: Ipv4Addr,
}

/// A namespace for a test, or `None` when this machine cannot make one
/// (not root, no `ip` or `nft`): the test should return early. Panics
/// instead when `SLUICE_REQUIRE_NETNS` is set.
pub fn require_netns() -> Option<NetNs> {
    match NetNs::create() {
        Ok(ns) => Some(ns),
        Err(e) if std::env::var_os("SLUICE_REQUIRE_NETNS").is_some() => {
            panic!("cannot create a network namespace but SLUICE_REQUIRE_NETNS is set: {e}")
        }
        Err(e) => {
            eprintln!("skipping: cannot create a network namespace ({e})");
            None
        }
    }
}

/// Runs a command; its stderr (or how it could not start) on failure.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    run_with_input(program, args, None)
}

fn run_with_input(program: &str, args: &[&str], input: Option<&str>) -> Result<String, String> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{program}: {e}"))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .map_err(|e| format!("{program}: {e}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {}: {}: {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Deletes the namespaces a test process that no longer runs left behind.
fn delete_stale() {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let Some(name) = line.split_whitespace().next() else {
            continue;
        };
        let Some(pid) = name
            .strip_prefix(PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

impl NetNs {
    /// Creates a namespace with a veth pair to the host: the host end gets
    /// the first address of a free /30 in 10.213.0.0/16, the namespace end
    /// the second. Checks that `nft` runs in it.
    pub fn create() -> Result<Self, String> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        run("nft", &["--version"])?;
        let _guard = CREATE.lock().unwrap_or_else(|e| e.into_inner());
        delete_stale();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let taken = run("ip", &["-o", "-4", "addr", "show"])?;
        // A /30 per namespace: 16384 of them in the /16. Start at one that
        // depends on the pid, so that concurrent test processes rarely try
        // the same one, and skip those already on an interface.
        let first = (pid.wrapping_mul(97).wrapping_add(n.wrapping_mul(13))) % 16384;
        let (host_addr, ns_addr) = (0..16384)
            .map(|i| (first + i) % 16384)
            .map(|k| {
                let base = u32::from(Ipv4Addr::new(10, 213, 0, 0)) + 4 * k;
                (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
            })
            .find(|(h, s)| {
                !taken.contains(&format!("inet {h}/")) && !taken.contains(&format!("inet {s}/"))
            })
            .ok_or("no free /30 in 10.213.0.0/16")?;
        let ns = Self {
            name: format!("{PREFIX}{pid}-{n}"),
            host_if: format!("slh{pid}x{n}"),
            host_addr,
            ns_addr,
        };
        run("ip", &["netns", "add", &ns.name])?;
        // From here on, a failure deletes what was made (on drop).
        let host_cidr = format!("{host_addr}/30");
        let ns_cidr = format!("{ns_addr}/30");
        let steps: [&[&str]; 7] = [
            &[
                "link",
                "add",
                &ns.host_if,
                "type",
                "veth",
                "peer",
                "name",
                NS_IF,
                "netns",
                &ns.name,
            ],
            &["addr", "add", &host_cidr, "dev", &ns.host_if],
            &["link", "set", &ns.host_if, "up"],
            &["-n", &ns.name, "addr", "add", &ns_cidr, "dev", NS_IF],
            &["-n", &ns.name, "link", "set", NS_IF, "up"],
            &["-n", &ns.name, "link", "set", "lo", "up"],
            &["-n", &ns.name, "route", "show"],
        ];
        for step in steps {
            run("ip", step)?;
        }
        ns.nft("list ruleset\n")?;
        Ok(ns)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host end's address.
    pub fn host_addr(&self) -> Ipv4Addr {
        self.host_addr
    }

    /// The namespace end's address: what a server inside listens on.
    pub fn addr(&self) -> Ipv4Addr {
        self.ns_addr
    }

    /// `ip netns exec NAME`: runs a command in the namespace.
    pub fn exec_prefix(&self) -> [&str; 4] {
        ["ip", "netns", "exec", &self.name]
    }

    /// Starts a `redis-server` in the namespace, listening on
    /// [`addr`](Self::addr) and a free port; reached from the host over the
    /// pair (its `url()` and `addr()` say so).
    pub fn start_redis(&self, extra: &[&str]) -> RedisServer {
        RedisServer::start_wrapped(
            IpAddr::V4(self.ns_addr),
            &self.exec_prefix(),
            free_port(),
            extra,
        )
    }

    /// Runs an nftables script in the namespace.
    fn nft(&self, script: &str) -> Result<String, String> {
        run_with_input(
            "ip",
            &["netns", "exec", &self.name, "nft", "-f", "-"],
            Some(script),
        )
    }

    /// Drops `percent` % of the packets crossing the namespace's end of the
    /// pair, each way, at random (`numgen random mod 100 < percent`), and
    /// counts them. Replaces any loss set before.
    pub fn set_loss(&self, percent: u32) {
        assert!(percent <= 100, "{percent} %");
        let script = format!(
            "table inet {TABLE}\n\
             delete table inet {TABLE}\n\
             table inet {TABLE} {{\n\
               chain input {{ type filter hook input priority 0; policy accept;\n\
                 iifname \"{NS_IF}\" numgen random mod 100 < {percent} counter drop; }}\n\
               chain output {{ type filter hook output priority 0; policy accept;\n\
                 oifname \"{NS_IF}\" numgen random mod 100 < {percent} counter drop; }}\n\
             }}\n"
        );
        self.nft(&script)
            .unwrap_or_else(|e| panic!("cannot set the loss: {e}"));
    }

    /// How many packets the loss rules have dropped so far (0 without
    /// them).
    pub fn dropped_packets(&self) -> u64 {
        let Ok(text) = run(
            "ip",
            &[
                "netns", "exec", &self.name, "nft", "list", "table", "inet", TABLE,
            ],
        ) else {
            return 0;
        };
        text.split("counter packets ")
            .skip(1)
            .filter_map(|rest| rest.split_whitespace().next())
            .filter_map(|n| n.parse::<u64>().ok())
            .sum()
    }

    /// Removes the loss rules.
    pub fn clear_loss(&self) {
        self.nft(&format!("table inet {TABLE}\ndelete table inet {TABLE}\n"))
            .unwrap_or_else(|e| panic!("cannot clear the loss: {e}"));
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        // Deleting the namespace destroys its end of the pair, and with it
        // the host end; delete the host end too in case a process still
        // holds the namespace.
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.host_if]);
    }
}
