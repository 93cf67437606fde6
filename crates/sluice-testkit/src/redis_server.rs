//! One `redis-server` process on a loopback port.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Polls `done` every 50 ms until it holds; panics after `timeout` saying
/// what it waited for.
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if done() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("timed out waiting until {what}");
}

/// A free TCP port on 127.0.0.1 (bound, then released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// Whether `redis-server` can be run here.
pub fn redis_available() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// `true` when a Redis test should run: Redis is installed. When it is not,
/// returns `false` (the test should return early) unless
/// `SLUICE_REQUIRE_REDIS` is set, in which case it panics.
pub fn require_redis() -> bool {
    if redis_available() {
        return true;
    }
    if std::env::var_os("SLUICE_REQUIRE_REDIS").is_some() {
        panic!("redis-server is not installed but SLUICE_REQUIRE_REDIS is set");
    }
    eprintln!("skipping: redis-server is not installed");
    false
}

/// A running `redis-server`, killed on drop. Its data directory is a fresh
/// temporary directory; persistence is off.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    extra: Vec<String>,
    /// The address it listens on: 127.0.0.1, or a test namespace's.
    host: IpAddr,
    /// A command that runs `redis-server` (e.g. `ip netns exec NAME`);
    /// empty to run it directly.
    wrapper: Vec<String>,
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts a server on a free port with extra `--name value` arguments,
    /// e.g. `&["--cluster-enabled", "yes"]`.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_on(free_port(), extra)
    }

    /// Starts a server on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> Self {
        Self::start_wrapped(IpAddr::V4(Ipv4Addr::LOCALHOST), &[], port, extra)
    }

    /// Starts a server listening on `host:port`, run through `wrapper`
    /// (`["ip", "netns", "exec", "NAME"]` runs it in a network namespace;
    /// see [`NetNs::start_redis`](crate::NetNs::start_redis)). A server on
    /// an address other than loopback runs with `--protected-mode no`.
    pub fn start_wrapped(host: IpAddr, wrapper: &[&str], port: u16, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "sluice-redis-{}-{port}-{}",
            std::process::id(),
            Instant::now().elapsed().as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let mut server = Self {
            child: None,
            port,
            dir,
            extra: extra.iter().map(|s| s.to_string()).collect(),
            host,
            wrapper: wrapper.iter().map(|s| s.to_string()).collect(),
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let mut command = match self.wrapper.split_first() {
            Some((program, args)) => {
                let mut c = Command::new(program);
                c.args(args).arg("redis-server");
                c
            }
            None => Command::new("redis-server"),
        };
        if !self.host.is_loopback() {
            command.args(["--protected-mode", "no"]);
        }
        let child = command
            .args(["--port", &self.port.to_string()])
            .args(["--bind", &self.host.to_string()])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--dir", &self.dir.to_string_lossy()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start redis-server: {e}"));
        self.child = Some(child);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let what = format!("redis-server on port {} answers PING", self.port);
        wait_until(&what, START_TIMEOUT, || self.ping());
    }

    /// Whether the server answers `PING` now.
    pub fn ping(&self) -> bool {
        self.command(&["PING"])
            .map(|r| r.starts_with("+PONG"))
            .unwrap_or(false)
    }

    /// Sends one command over a fresh connection and returns the raw RESP
    /// reply (first read only; enough for short replies).
    pub fn command(&self, args: &[&str]) -> std::io::Result<String> {
        let mut s = TcpStream::connect_timeout(&self.addr(), Duration::from_millis(500))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes())?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = s.read(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.host, self.port)
    }

    /// `redis://HOST:PORT` (`redis://127.0.0.1:PORT` unless it runs in a
    /// namespace).
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr())
    }

    /// Kills the server (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts the server again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
