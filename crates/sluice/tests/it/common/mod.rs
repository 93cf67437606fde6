//! Shared helpers for the HTTP integration tests: start the real `sluice`
//! binary on ephemeral ports, write temporary configs, run an in-test
//! upstream, and parse the rate-limit header fields.
//!
//! Every process and server started here is stopped on `Drop`, so nothing
//! leaks when a test panics.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub mod certs;
pub mod llm_upstream;
pub mod nginx;
pub mod prom;

/// How long `serve` may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A guard against hung requests; not a timing assertion.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The text of a file under `examples/`.
pub fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The path of a file under `examples/`.
pub fn example_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name)
}

/// `text` with `from` replaced by `to`; panics if `from` is not there, so a
/// changed example cannot silently make a test vacuous.
pub fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "expected exactly one `{from}` in the config"
    );
    text.replacen(from, to, 1)
}

/// A config file under the temp dir with a unique name, removed on drop.
#[derive(Debug)]
pub struct TempConfig {
    path: PathBuf,
}

impl TempConfig {
    /// Writes `text` to a fresh file whose name contains `label`.
    pub fn new(label: &str, text: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "sluice-it-{}-{n}-{nanos}-{label}.toml",
            std::process::id()
        ));
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Self { path }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempConfig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Kills and reaps a child process when dropped.
#[derive(Debug)]
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The binary under test: this build's, or `SLUICE_TEST_BINARY` (to show
/// that a new test fails on an older build).
pub fn sluice_binary() -> PathBuf {
    std::env::var_os("SLUICE_TEST_BINARY").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_sluice")),
        PathBuf::from,
    )
}

/// A running `sluice serve`.
#[derive(Debug)]
pub struct Sluice {
    child: KillOnDrop,
    /// The data plane's address.
    pub data: SocketAddr,
    /// The control API's address.
    pub control: SocketAddr,
    /// The Envoy Rate Limit Service's address, when configured.
    pub grpc: Option<SocketAddr>,
    log: Arc<Mutex<String>>,
    // Reads stderr into `log` until the process closes it.
    reader: Option<JoinHandle<()>>,
    // Keeps the config file alive as long as the process.
    config: Option<TempConfig>,
}

type Listening = (SocketAddr, SocketAddr, Option<SocketAddr>);

fn parse_listening(line: &str) -> Option<Listening> {
    let rest = line.strip_prefix("sluice: listening data=http://")?;
    let (data, rest) = rest.split_once(" control=http://")?;
    let (control, grpc) = match rest.split_once(" grpc=") {
        Some((control, grpc)) => (control, Some(grpc.trim().parse().ok()?)),
        None => (rest, None),
    };
    Some((
        data.trim().parse().ok()?,
        control.trim().parse().ok()?,
        grpc,
    ))
}

impl Sluice {
    /// Starts `sluice serve` on a config written from `text`.
    pub fn start_with(label: &str, text: &str) -> Self {
        Self::start_with_args(label, text, &[])
    }

    /// Like [`Sluice::start_with`], with extra `serve` arguments.
    pub fn start_with_args(label: &str, text: &str, extra: &[&str]) -> Self {
        let config = TempConfig::new(label, text);
        let mut s = Self::start_args(config.path(), extra);
        s.config = Some(config);
        s
    }

    /// Starts `sluice serve --config <config>` on ephemeral loopback ports
    /// and waits for its listening line.
    pub fn start(config: &Path) -> Self {
        Self::start_args(config, &[])
    }

    /// Like [`Sluice::start_with`], with environment variables.
    pub fn start_with_env(label: &str, text: &str, env: &[(&str, &str)]) -> Self {
        let config = TempConfig::new(label, text);
        let mut s = Self::start_env(config.path(), &[], env);
        s.config = Some(config);
        s
    }

    /// Keeps `config` (a file the process reads) as long as the process.
    pub fn keep_config(&mut self, config: TempConfig) {
        self.config = Some(config);
    }

    /// The config file written by [`Sluice::start_with`].
    pub fn config_path(&self) -> &Path {
        self.config.as_ref().expect("started from text").path()
    }

    /// Like [`Sluice::start`], with extra `serve` arguments.
    pub fn start_args(config: &Path, extra: &[&str]) -> Self {
        Self::start_env(config, extra, &[])
    }

    /// Like [`Sluice::start`], with extra arguments and environment.
    pub fn start_env(config: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(sluice_binary());
        cmd.envs(env.iter().copied());
        Self::launch(cmd, config, extra)
    }

    /// Starts `sluice serve` on a config written from `text`, with at most
    /// `nofile` open files (`ulimit -n`, soft and hard).
    pub fn start_with_nofile(label: &str, text: &str, nofile: u32) -> Self {
        let config = TempConfig::new(label, text);
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(sluice_binary());
        let mut s = Self::launch(cmd, config.path(), &[]);
        s.config = Some(config);
        s
    }

    /// Runs `cmd` (the binary, or a wrapper that execs it) as `serve` on
    /// ephemeral ports and waits for its listening line.
    fn launch(mut cmd: Command, config: &Path, extra: &[&str]) -> Self {
        if !cmd.get_envs().any(|(k, _)| k == "SLUICE_LOG") {
            cmd.env("SLUICE_LOG", "info");
        }
        cmd.arg("serve")
            .arg("--config")
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0"])
            .args(extra);
        Self::spawn(cmd)
    }

    /// Starts `sluice envoy-ratelimit` with `env` as its whole environment
    /// (give it ports 0, so that it binds ephemeral ones) and waits for its
    /// listening line.
    pub fn start_envoy_ratelimit(env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(sluice_binary());
        cmd.env_clear()
            .envs(env.iter().copied())
            .arg("envoy-ratelimit");
        Self::spawn(cmd)
    }

    /// Runs `cmd`, its arguments given, and waits for its listening line.
    fn spawn(mut cmd: Command) -> Self {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluice");
        let mut child = KillOnDrop(child);
        let stderr = child.0.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let thread_log = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(addrs) = parse_listening(&line) {
                    let _ = tx.send(addrs);
                }
                let mut log = thread_log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let (data, control, grpc) = match rx.recv_timeout(START_TIMEOUT) {
            Ok(addrs) => addrs,
            Err(e) => {
                // Give the reader a moment to collect what the process said.
                std::thread::sleep(Duration::from_millis(100));
                let status = child.0.try_wait();
                panic!(
                    "sluice did not print its listening line ({e:?}); status {status:?}; stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Self {
            child,
            data,
            control,
            grpc,
            log,
            reader: Some(reader),
            config: None,
        }
    }

    /// A gRPC client of its Envoy Rate Limit Service.
    pub async fn rls_client(
        &self,
    ) -> envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient<
        tonic::transport::Channel,
    >{
        let grpc = self.grpc.expect("a grpc address");
        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient::connect(format!("http://{grpc}"))
            .await
            .unwrap()
    }

    /// A URL on the data plane.
    pub fn url(&self, path_and_query: &str) -> String {
        format!("http://{}{path_and_query}", self.data)
    }

    /// A URL on the control API.
    pub fn control_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.control)
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Sends SIGTERM with `kill -TERM <pid>`.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends a signal by name (`TERM`, `INT`) with `kill -<NAME> <pid>`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} failed: {status}");
    }

    /// Waits for the process to exit, panicking after `timeout` (a guard
    /// against hangs, not a timing assertion). Once it has, [`Self::log`]
    /// holds all it wrote.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.0.try_wait().expect("try_wait") {
                // Its stderr is closed now: let the reader drain it.
                if let Some(reader) = self.reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not exit; stderr:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// What the process has written to stderr so far.
    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits until the log holds `text` (a guard of 20 s against hangs, not
    /// a timing claim).
    pub async fn log_says(&self, text: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.log().contains(text) {
            assert!(
                Instant::now() < deadline,
                "never logged {text:?}; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// An HTTP client for the tests: no proxies, a generous overall timeout.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("build the HTTP client")
}

/// A response read in full.
#[derive(Debug, Clone)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The header fields.
    pub headers: reqwest::header::HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

/// POSTs `body` as JSON to `path` on the control listener of `s`.
pub async fn post_control(s: &Sluice, path: &str, body: &serde_json::Value) -> Reply {
    send(
        client()
            .post(s.control_url(path))
            .header("content-type", "application/json")
            .body(body.to_string()),
    )
    .await
}

/// Sends a request and reads the whole response.
pub async fn send(request: reqwest::RequestBuilder) -> Reply {
    let response = request.send().await.expect("send the request");
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body = response.bytes().await.expect("read the body").to_vec();
    Reply {
        status,
        headers,
        body,
    }
}

impl Reply {
    /// A header's value; panics when absent or not visible ASCII.
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .unwrap_or_else(|| panic!("no `{name}` in {:?}", self.headers))
            .to_str()
            .unwrap_or_else(|e| panic!("`{name}` is not visible ASCII: {e}"))
    }

    /// Whether a header is present.
    pub fn has(&self, name: &str) -> bool {
        self.headers.contains_key(name)
    }

    /// A header's value as a non-negative integer; panics otherwise.
    pub fn int_header(&self, name: &str) -> u64 {
        let v = self.header(name);
        v.parse()
            .unwrap_or_else(|e| panic!("`{name}: {v}` is not an integer: {e}"))
    }

    /// The body as JSON; panics when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// `RateLimit-Policy`, parsed.
    pub fn policy(&self) -> Vec<SfItem> {
        sf_list(self.header("ratelimit-policy"), &["q", "w"])
    }

    /// `RateLimit`, parsed.
    pub fn ratelimit(&self) -> Vec<SfItem> {
        sf_list(self.header("ratelimit"), &["r", "t"])
    }

    /// Checks the reply is `application/problem+json` with `status` in both
    /// the status line and the body, and returns the body.
    pub fn problem(&self, status: u16) -> serde_json::Value {
        assert_eq!(
            self.status,
            status,
            "body: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert_eq!(self.header("content-type"), "application/problem+json");
        let body = self.json();
        assert_eq!(body["status"], status, "problem body {body}");
        assert!(body["title"].is_string(), "problem body {body}");
        assert!(body["detail"].is_string(), "problem body {body}");
        body
    }
}

/// One item of a rate-limit Structured Field List: a String with integer
/// parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SfItem {
    /// The item's String value (the limit's name).
    pub name: String,
    /// Its parameters.
    pub params: BTreeMap<String, i64>,
}

impl SfItem {
    /// An integer parameter; panics when absent.
    pub fn param(&self, key: &str) -> i64 {
        *self
            .params
            .get(key)
            .unwrap_or_else(|| panic!("item {self:?} lacks parameter `{key}`"))
    }
}

/// Parses an RFC 9651 List whose members are all String items with integer
/// parameters named in `keys` (and no others); panics otherwise.
pub fn sf_list(value: &str, keys: &[&str]) -> Vec<SfItem> {
    let list = sfv::Parser::new(value)
        .parse::<sfv::List>()
        .unwrap_or_else(|e| panic!("`{value}` is not a Structured Field List: {e}"));
    assert!(!list.is_empty(), "empty list `{value}`");
    list.into_iter()
        .map(|entry| {
            let sfv::ListEntry::Item(item) = entry else {
                panic!("`{value}` holds an inner list");
            };
            let name = item
                .bare_item
                .as_string()
                .unwrap_or_else(|| panic!("`{value}`: item {:?} is not a String", item.bare_item))
                .as_str()
                .to_owned();
            let params: BTreeMap<String, i64> = item
                .params
                .iter()
                .map(|(k, v)| {
                    let n = v.as_integer().unwrap_or_else(|| {
                        panic!("`{value}`: parameter `{}` is not an Integer", k.as_str())
                    });
                    (k.as_str().to_owned(), i64::from(n))
                })
                .collect();
            let mut got: Vec<&str> = params.keys().map(String::as_str).collect();
            let mut want = keys.to_vec();
            got.sort_unstable();
            want.sort_unstable();
            assert_eq!(got, want, "`{value}`: parameters of `{name}`");
            SfItem { name, params }
        })
        .collect()
}

/// The item named `name` in a parsed list; panics when absent.
pub fn sf_item<'a>(list: &'a [SfItem], name: &str) -> &'a SfItem {
    list.iter()
        .find(|i| i.name == name)
        .unwrap_or_else(|| panic!("no item `{name}` in {list:?}"))
}

/// A request the upstream received.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The method.
    pub method: String,
    /// The path and query, as received.
    pub path_and_query: String,
    /// The header fields, as received.
    pub headers: axum::http::HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

/// What the upstream answers.
#[derive(Debug, Clone)]
pub struct UpstreamReply {
    /// The status.
    pub status: u16,
    /// How long to wait before answering.
    pub delay: Duration,
}

/// The fixed body the upstream answers with.
pub const UPSTREAM_BODY: &str = "hello from the upstream\n";

#[derive(Debug, Default)]
struct UpstreamState {
    arrived: AtomicUsize,
    recorded: Mutex<Vec<Recorded>>,
}

/// An HTTP server on an ephemeral loopback port, on its own thread and
/// runtime, that records every request and answers `UpstreamReply` with
/// header fields `x-upstream: yes`, `content-type: application/x-upstream`,
/// `set-cookie: a=1`, `set-cookie: b=2` and body [`UPSTREAM_BODY`]. Stopped
/// on drop.
#[derive(Debug)]
pub struct Upstream {
    /// Its address.
    pub addr: SocketAddr,
    state: Arc<UpstreamState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Starts an upstream.
    pub fn start(reply: UpstreamReply) -> Self {
        let state = Arc::new(UpstreamState::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_state = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("upstream runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind the upstream");
                ready_tx.send(listener.local_addr().expect("addr")).unwrap();
                let app = axum::Router::new()
                    .fallback(move |req: axum::extract::Request| {
                        let state = thread_state.clone();
                        let reply = reply.clone();
                        async move { upstream_handle(state, reply, req).await }
                    })
                    .into_make_service();
                tokio::select! {
                    r = axum::serve(listener, app) => r.expect("upstream serve"),
                    _ = stopped => {}
                }
            });
        });
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the upstream started");
        Self {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Its base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many requests have reached it (counted on arrival, before the
    /// body is read).
    pub fn arrived(&self) -> usize {
        self.state.arrived.load(Ordering::SeqCst)
    }

    /// The requests it has fully received.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.state.recorded.lock().unwrap().clone()
    }
}

async fn upstream_handle(
    state: Arc<UpstreamState>,
    reply: UpstreamReply,
    req: axum::extract::Request,
) -> axum::response::Response {
    state.arrived.fetch_add(1, Ordering::SeqCst);
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .expect("the upstream read the body");
    state.recorded.lock().unwrap().push(Recorded {
        method: parts.method.to_string(),
        path_and_query: parts
            .uri
            .path_and_query()
            .map_or_else(String::new, |pq| pq.as_str().to_owned()),
        headers: parts.headers,
        body: body.to_vec(),
    });
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    axum::response::Response::builder()
        .status(reply.status)
        .header("x-upstream", "yes")
        .header("content-type", "application/x-upstream")
        .header("set-cookie", "a=1")
        .header("set-cookie", "b=2")
        .body(axum::body::Body::from(UPSTREAM_BODY))
        .expect("the upstream response")
}

impl Drop for Upstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A loopback port with nothing listening on it (bound, then released).
pub fn unused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// The proxy example with its `upstream` pointed at `url`.
pub fn proxy_config(url: &str) -> String {
    replace_once(
        &example("proxy.toml"),
        "upstream = \"http://127.0.0.1:8000\"",
        &format!("upstream = \"{url}\""),
    )
}

/// A response read off a raw socket.
#[derive(Debug, Clone)]
pub struct RawReply {
    /// The status code (0 if the connection closed without one).
    pub status: u16,
    /// Everything the server sent.
    pub text: String,
}

/// Sends `request` as it is (for spellings an HTTP client would tidy up)
/// on a fresh connection, and reads until the server closes it. The
/// request should say `Connection: close`.
pub async fn raw_http(addr: SocketAddr, request: &str) -> RawReply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, stream.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    RawReply { status, text }
}

/// A `GET` of `path` exactly as written, with `X-Api-Key: key`.
pub async fn raw_get(addr: SocketAddr, path: &str, key: &str) -> RawReply {
    raw_http(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: sluice.test\r\nX-Api-Key: {key}\r\nConnection: close\r\n\r\n"),
    )
    .await
}

/// A sample of `/metrics` on `s`'s control listener.
pub async fn metric(s: &Sluice, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let r = send(client().get(s.control_url("/metrics"))).await;
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let samples = prom::parse(&text)?;
    prom::value(&samples, name, labels)
}

pub mod faults;

/// The two-instance exactness check: fifty clients, split over `a` and `b`
/// (two instances on one store), hammer `key`, whose plan is a token bucket
/// of `rate` per second and `burst`, for about three seconds. Admitted
/// requests must fit what the bucket allows over the run, and fall short of
/// it by at most one refill interval; Redis must decide every request (the
/// instances need a store timeout generous enough for a busy machine).
/// Returns how many were admitted.
pub async fn two_instances_admit_exactly(
    a: &Arc<Sluice>,
    b: &Arc<Sluice>,
    key: &str,
    rate: u64,
    burst: u64,
) -> u64 {
    use std::sync::atomic::AtomicU64;
    let client = client();
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let fallback = Arc::new(AtomicU64::new(0));
    let first_reply = Arc::new(Mutex::new(None::<Instant>));
    let last_send = Arc::new(Mutex::new(None::<Instant>));
    let begin = Instant::now();
    let run_for = Duration::from_secs(3);
    let mut tasks = Vec::new();
    for c in 0..50 {
        let s = if c % 2 == 0 { a.clone() } else { b.clone() };
        let (client, admitted, refused, fallback) = (
            client.clone(),
            admitted.clone(),
            refused.clone(),
            fallback.clone(),
        );
        let (first_reply, last_send) = (first_reply.clone(), last_send.clone());
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            while begin.elapsed() < run_for {
                let sent = Instant::now();
                *last_send.lock().unwrap() = Some(sent);
                let r = send(client.get(s.url("/")).header("X-Api-Key", &key)).await;
                first_reply.lock().unwrap().get_or_insert_with(Instant::now);
                if r.has("sluice-fallback") {
                    fallback.fetch_add(1, Ordering::Relaxed);
                }
                match r.status {
                    200 => admitted.fetch_add(1, Ordering::Relaxed),
                    429 => refused.fetch_add(1, Ordering::Relaxed),
                    s => panic!("unexpected status {s}"),
                };
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let end = Instant::now();
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(
        fallback.load(Ordering::Relaxed),
        0,
        "Redis decided every request"
    );
    assert!(
        refused.load(Ordering::Relaxed) > 0,
        "the load exceeded the limit"
    );

    // Every decision happened between the first send and the last reply
    // (outer), and the decisions spanned at least from the first reply to
    // the last send (inner).
    let outer = (end - begin).as_secs_f64();
    let inner =
        (last_send.lock().unwrap().unwrap() - first_reply.lock().unwrap().unwrap()).as_secs_f64();
    let rate_f = rate as f64;
    let most = burst + (rate_f * outer).floor() as u64;
    let least = (burst + (rate_f * inner).floor() as u64).saturating_sub(1);
    eprintln!(
        "admitted {admitted}; allowed between {least} and {most} (inner {inner:.3}s, outer {outer:.3}s)"
    );
    assert!(
        admitted <= most,
        "admitted {admitted} > {most}: more than the global limit"
    );
    assert!(
        admitted >= least,
        "admitted {admitted} < {least}: quota within the limit was refused"
    );
    admitted
}

/// Waits, when the next boundary of `unit_secs`-long windows aligned on
/// the Unix clock is less than `margin_secs` away, until just past it: a
/// test counting in such windows then runs within one.
pub async fn clear_of_window_edge(unit_secs: u64, margin_secs: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let into = now.as_secs_f64() % unit_secs as f64;
    let left = unit_secs as f64 - into;
    if left < margin_secs as f64 {
        tokio::time::sleep(std::time::Duration::from_secs_f64(left + 0.5)).await;
    }
}
