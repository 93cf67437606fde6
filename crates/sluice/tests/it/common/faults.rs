//! What the fault tests (`faults_cluster`, `faults_network`) share: a
//! config with a plan the load never exhausts and a small exact plan for
//! the exactness check, a bounded load that records every request, its
//! one-line summary, the store's metrics, the guards every fault must
//! pass, and a TCP proxy that delays what it forwards.
//!
//! The guards are hang guards, not benchmarks: a request may take the
//! store timeout plus [`MARGIN`] (generous on a shared 2-core machine)
//! plus what a control instance on the memory store took meanwhile, and
//! every answer must be one the documented fallback gives (200 or 429 with
//! the `local` fallback).

use super::{Sluice, TempConfig, client, send, two_instances_admit_exactly};

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Shared by every instance of a test, as `SLUICE_KEY_SECRET` must be.
pub const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "test-secret-faults");

/// The exact plan: the exactness check's token bucket.
pub const EXACT_RATE: u64 = 50;
/// The exact plan's burst.
pub const EXACT_BURST: u64 = 20;

/// The keys on the exact plan (several, so that a cluster test can pick
/// one whose slot suits the fault).
pub const EXACT_KEYS: [&str; 8] = [
    "exact-0", "exact-1", "exact-2", "exact-3", "exact-4", "exact-5", "exact-6", "exact-7",
];

/// How much longer than the store timeout a request may take.
pub const MARGIN: Duration = Duration::from_millis(500);

/// How long the load runs before a fault, and on after it.
const LEAD_IN: Duration = Duration::from_millis(300);
const TAIL: Duration = Duration::from_millis(700);

/// Each load client sends at most one request per this interval.
const PACE: Duration = Duration::from_millis(20);

/// The load's bounds: however long the fault lasts.
const LOAD_MAX_TIME: Duration = Duration::from_secs(40);
const LOAD_MAX_REQUESTS: usize = 30_000;

/// Distinct API keys per load client (spread over the Cluster's slots).
const KEYS_PER_CLIENT: usize = 32;

/// A config for the fault tests: the `local` fallback shared over two
/// instances, a `load` plan (the default) far above what the load sends,
/// and the `exact` plan ([`EXACT_RATE`], [`EXACT_BURST`]) for
/// [`EXACT_KEYS`]. The load plan refills slowly (1/s, burst a million), so
/// that a load key's bucket stays in Redis for the whole test: a slot
/// migration moves live state, a failover must keep it.
pub fn config(timeout: Duration) -> String {
    let keys: String = EXACT_KEYS
        .iter()
        .map(|k| format!("{k} = \"exact\"\n"))
        .collect();
    format!(
        r#"[store]
timeout = "{timeout}ms"
fallback = "local"
expected_instances = 2

[client]
key = "header:X-Api-Key"
default_plan = "load"

[plans.load]
limits = [{{ algorithm = "token_bucket", rate = "1/s", burst = 1000000 }}]

[plans.exact]
limits = [{{ algorithm = "token_bucket", rate = "{EXACT_RATE}/s", burst = {EXACT_BURST} }}]

[keys]
{keys}"#,
        timeout = timeout.as_millis()
    )
}

/// `sluice serve` on `url` with [`config`]`(timeout)`.
pub fn start(label: &str, url: &str, timeout: Duration) -> Arc<Sluice> {
    let config = TempConfig::new(label, &config(timeout));
    let mut s = Sluice::start_env(config.path(), &["--store-url", url], &[SECRET]);
    s.config = Some(config);
    Arc::new(s)
}

/// The store's default timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(10);

/// The pair's store timeout: the one the exactness check needs, as in
/// `redis_shared` (a loaded test machine never misses it, so Redis decides
/// every request of the check). Above every fault here, too.
pub const PAIR_TIMEOUT: Duration = Duration::from_secs(2);

/// Load clients per instance.
pub const CLIENTS: usize = 2;

/// The instances of a fault test on one store: one per timeout the test
/// looks at (the default first), a pair with [`PAIR_TIMEOUT`] for the
/// exactness check afterwards, and a control on the memory store that
/// measures how slow the machine itself is meanwhile (see
/// [`Summary::assert_guards`]).
pub struct Instances {
    /// One instance per timeout.
    pub singles: Vec<(Duration, Arc<Sluice>)>,
    /// The pair: one instance.
    pub a: Arc<Sluice>,
    /// The pair: the other.
    pub b: Arc<Sluice>,
    control: Arc<Sluice>,
}

impl Instances {
    /// Starts them on `url`: one instance per timeout in `timeouts`, the
    /// pair, and the control.
    pub fn start(label: &str, url: &str, timeouts: &[Duration]) -> Self {
        let singles = timeouts
            .iter()
            .map(|&t| {
                let name = format!("{label}-{}ms", t.as_millis());
                (t, start(&name, url, t))
            })
            .collect();
        Self {
            singles,
            a: start(&format!("{label}-a"), url, PAIR_TIMEOUT),
            b: start(&format!("{label}-b"), url, PAIR_TIMEOUT),
            control: start(&format!("{label}-control"), "memory://", DEFAULT_TIMEOUT),
        }
    }

    /// Each timeout and its instances: the singles, then the pair.
    fn groups(&self) -> Vec<(Duration, Vec<Arc<Sluice>>)> {
        let mut groups: Vec<(Duration, Vec<Arc<Sluice>>)> = self
            .singles
            .iter()
            .map(|(t, s)| (*t, vec![s.clone()]))
            .collect();
        groups.push((PAIR_TIMEOUT, vec![self.a.clone(), self.b.clone()]));
        groups
    }

    /// The instances on the store.
    fn on_store(&self) -> Vec<Arc<Sluice>> {
        self.groups().into_iter().flat_map(|(_, g)| g).collect()
    }

    /// Waits until Redis decides on every instance on the store.
    pub async fn wait_redis_decides(&self, within: Duration) {
        for s in self.on_store() {
            wait_redis_decides(&s, within).await;
        }
    }

    async fn metrics(&self) -> Vec<StoreMetrics> {
        let mut out = Vec::new();
        for (_, group) in self.groups() {
            let members: Vec<&Sluice> = group.iter().map(|s| &**s).collect();
            out.push(StoreMetrics::sum(&members).await);
        }
        out
    }

    /// Starts the load on every instance ([`CLIENTS`] clients each) and
    /// lets it run for a moment before the fault.
    pub async fn start_load(&self) -> Running {
        let before = self.metrics().await;
        let mut targets = self.on_store();
        targets.push(self.control.clone());
        let load = Load::start(&targets, CLIENTS);
        tokio::time::sleep(LEAD_IN).await;
        Running { load, before }
    }

    /// Lets the load run on for a moment after the fault (from `onset` to
    /// `cleared`), stops it, prints a summary per timeout and how the
    /// fallback's share moved, and checks the guards.
    pub async fn finish(
        &self,
        running: Running,
        fault: &str,
        onset: Instant,
        cleared: Instant,
    ) -> FaultRun {
        tokio::time::sleep(TAIL).await;
        let samples = running.load.stop().await;
        let after = self.metrics().await;
        let groups = self.groups();
        // Targets are numbered as `start_load` listed them.
        let mut first = 0;
        let mut run = FaultRun {
            groups: Vec::new(),
            control: Vec::new(),
        };
        for (timeout, members) in &groups {
            let range = first..first + members.len();
            first = range.end;
            let mine = samples
                .iter()
                .filter(|s| range.contains(&s.target))
                .cloned()
                .collect();
            run.groups.push((*timeout, mine));
        }
        run.control = samples
            .iter()
            .filter(|s| s.target == first)
            .cloned()
            .collect();
        let control: Vec<&Sample> = run.control.iter().collect();
        let mut summaries = Vec::new();
        for (i, (timeout, mine)) in run.groups.iter().enumerate() {
            let mine: Vec<&Sample> = mine.iter().collect();
            let summary = Summary::of(fault, *timeout, &mine, after[i] - running.before[i]);
            summary.print();
            eprintln!("{fault}, {timeout:?}: {}", phases(&mine, onset, cleared));
            summaries.push((summary, mine));
        }
        let slowest = control.iter().map(|s| s.took).max().unwrap_or_default();
        eprintln!(
            "{fault}: the control (memory store) answered {} requests, the slowest in {slowest:?}",
            control.len()
        );
        for (i, (summary, mine)) in summaries.iter().enumerate() {
            let log: String = groups[i].1.iter().map(|s| s.log()).collect();
            summary.assert_guards(mine, &control, &log);
        }
        run
    }

    /// After the fault: Redis decides again on every instance (within
    /// `within`), and the pair admits exactly one global limit for `key`
    /// (on the exact plan).
    pub async fn recover_and_check_exactness(&self, key: &str, within: Duration) {
        for s in self.on_store() {
            let took = wait_redis_decides(&s, within).await;
            eprintln!("Redis decided again after {took:?} of polling");
        }
        two_instances_admit_exactly(&self.a, &self.b, key, EXACT_RATE, EXACT_BURST).await;
    }
}

/// A load started by [`Instances::start_load`].
pub struct Running {
    load: Load,
    before: Vec<StoreMetrics>,
}

/// What the load saw during a fault.
pub struct FaultRun {
    groups: Vec<(Duration, Vec<Sample>)>,
    control: Vec<Sample>,
}

impl FaultRun {
    /// The requests to the instances with store timeout `timeout`.
    pub fn at(&self, timeout: Duration) -> Vec<&Sample> {
        self.groups
            .iter()
            .filter(|(t, _)| *t == timeout)
            .flat_map(|(_, s)| s.iter())
            .collect()
    }
}

/// Polls with fresh keys until Redis has decided `streak` requests in a
/// row on `sluice` (a hang guard of `within`); returns how long it took.
pub async fn wait_redis_decides(sluice: &Sluice, within: Duration) -> Duration {
    static PROBE: AtomicUsize = AtomicUsize::new(0);
    let streak_needed = 5;
    let c = client();
    let started = Instant::now();
    let mut streak = 0;
    loop {
        let n = PROBE.fetch_add(1, Ordering::Relaxed);
        let r = send(
            c.get(sluice.url("/"))
                .header("X-Api-Key", format!("probe-{n}")),
        )
        .await;
        assert_eq!(r.status, 200, "{r:?}");
        if r.has("sluice-fallback") {
            streak = 0;
            assert!(
                started.elapsed() < within,
                "Redis did not decide again within {within:?}; log:\n{}",
                sluice.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        } else {
            streak += 1;
            if streak >= streak_needed {
                return started.elapsed();
            }
        }
    }
}

/// What one load request got.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// An answer: its status, and whether it carried `Sluice-Fallback`.
    Reply {
        /// The status.
        status: u16,
        /// Whether the fallback decided.
        fallback: bool,
    },
    /// No answer (a transport error or the client's own timeout).
    Error(String),
}

/// One load request.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Which target it went to (an index into the targets of [`Load`]).
    pub target: usize,
    /// When it was sent.
    pub sent: Instant,
    /// How long it took.
    pub took: Duration,
    /// What it got.
    pub outcome: Outcome,
}

impl Sample {
    /// Whether the fallback decided it.
    pub fn fallback(&self) -> bool {
        matches!(self.outcome, Outcome::Reply { fallback: true, .. })
    }

    /// Whether it is an answer the documented fallback gives: 200 or 429.
    pub fn documented(&self) -> bool {
        matches!(self.outcome, Outcome::Reply { status, .. } if status == 200 || status == 429)
    }
}

/// A bounded load: a few clients per target, each sending at most one
/// request per 20 ms, each over its own few API keys, until stopped (or
/// 40 s, or 30 000 requests in all). Every request is recorded.
pub struct Load {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Vec<Sample>>>,
}

impl Load {
    /// Starts `clients` clients on each of `targets`.
    pub fn start(targets: &[Arc<Sluice>], clients: usize) -> Self {
        static RUN: AtomicUsize = AtomicUsize::new(0);
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        // Far above any guard, so that a hung request is recorded (and
        // fails the guard) rather than stalling the test.
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("build the HTTP client");
        let begin = Instant::now();
        let mut tasks = Vec::new();
        for (target, sluice) in targets.iter().enumerate() {
            for c in 0..clients {
                let (http, url, stop, sent) =
                    (http.clone(), sluice.url("/"), stop.clone(), sent.clone());
                tasks.push(tokio::spawn(async move {
                    let mut samples = Vec::new();
                    let mut tick = tokio::time::interval(PACE);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    for n in 0.. {
                        tick.tick().await;
                        if stop.load(Ordering::Relaxed)
                            || begin.elapsed() > LOAD_MAX_TIME
                            || sent.fetch_add(1, Ordering::Relaxed) >= LOAD_MAX_REQUESTS
                        {
                            break;
                        }
                        let key = format!("load-{run}-{target}-{c}-{}", n % KEYS_PER_CLIENT);
                        let started = Instant::now();
                        let outcome = match http.get(&url).header("X-Api-Key", key).send().await {
                            Ok(r) => {
                                let status = r.status().as_u16();
                                let fallback = r.headers().contains_key("sluice-fallback");
                                match r.bytes().await {
                                    Ok(_) => Outcome::Reply { status, fallback },
                                    Err(e) => Outcome::Error(format!("body: {e}")),
                                }
                            }
                            Err(e) => Outcome::Error(e.to_string()),
                        };
                        samples.push(Sample {
                            target,
                            sent: started,
                            took: started.elapsed(),
                            outcome,
                        });
                    }
                    samples
                }));
            }
        }
        Self { stop, tasks }
    }

    /// Stops the clients and returns every request, in no order.
    pub async fn stop(self) -> Vec<Sample> {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Vec::new();
        for t in self.tasks {
            all.extend(t.await.expect("a load client panicked"));
        }
        all
    }
}

/// How the fallback's share of `samples` moved over a fault from `onset`
/// to `cleared`: before, during and after it, and when Redis first decided
/// again after it (for the reports, not asserted).
pub fn phases(samples: &[&Sample], onset: Instant, cleared: Instant) -> String {
    let count = |keep: &dyn Fn(&Sample) -> bool| {
        let all: Vec<&&Sample> = samples.iter().filter(|s| keep(s)).collect();
        let fallback = all.iter().filter(|s| s.fallback()).count();
        format!("{fallback}/{}", all.len())
    };
    let back = samples
        .iter()
        .filter(|s| s.sent >= cleared && !s.fallback())
        .map(|s| s.sent + s.took - cleared)
        .min();
    format!(
        "fallback decided {} before, {} during, {} after; Redis decided again {} after the fault ended",
        count(&|s| s.sent < onset),
        count(&|s| s.sent >= onset && s.sent < cleared),
        count(&|s| s.sent >= cleared),
        back.map_or_else(|| "never".to_owned(), |d| format!("{d:?}")),
    )
}

/// The store's counters on an instance, from `GET /metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreMetrics {
    /// `sluice_fallback_decisions_total`.
    pub fallback: u64,
    /// `sluice_store_errors_total{kind="error"}`.
    pub errors: u64,
    /// `sluice_store_errors_total{kind="timeout"}`.
    pub timeouts: u64,
}

impl StoreMetrics {
    /// Reads them from `sluice`.
    pub async fn of(sluice: &Sluice) -> Self {
        let r = send(client().get(sluice.control_url("/metrics"))).await;
        assert_eq!(r.status, 200);
        let text = String::from_utf8_lossy(&r.body).into_owned();
        let mut m = Self::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<f64>() else {
                continue;
            };
            let value = value as u64;
            if series.starts_with("sluice_fallback_decisions_total") {
                m.fallback += value;
            } else if series.starts_with("sluice_store_errors_total") {
                if series.contains("kind=\"timeout\"") {
                    m.timeouts += value;
                } else {
                    m.errors += value;
                }
            }
        }
        m
    }

    /// Summed over instances.
    pub async fn sum(instances: &[&Sluice]) -> Self {
        let mut total = Self::default();
        for s in instances {
            total = total + Self::of(s).await;
        }
        total
    }
}

impl std::ops::Add for StoreMetrics {
    type Output = Self;
    fn add(self, o: Self) -> Self {
        Self {
            fallback: self.fallback + o.fallback,
            errors: self.errors + o.errors,
            timeouts: self.timeouts + o.timeouts,
        }
    }
}

impl std::ops::Sub for StoreMetrics {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            fallback: self.fallback.saturating_sub(o.fallback),
            errors: self.errors.saturating_sub(o.errors),
            timeouts: self.timeouts.saturating_sub(o.timeouts),
        }
    }
}

/// What a group of instances saw during a fault.
#[derive(Debug, Clone)]
pub struct Summary {
    /// The fault.
    pub fault: String,
    /// The instances' store timeout.
    pub timeout: Duration,
    /// Requests sent.
    pub requests: usize,
    /// Their 99th percentile latency.
    pub p99: Duration,
    /// The slowest.
    pub max: Duration,
    /// Answers other than the documented ones (not 200 or 429, or none).
    pub errors: usize,
    /// Answers the fallback decided (`Sluice-Fallback`).
    pub fallback: usize,
    /// The instances' own counters over the fault.
    pub metrics: StoreMetrics,
}

impl Summary {
    /// Summarises `samples` (of one group of instances).
    pub fn of(fault: &str, timeout: Duration, samples: &[&Sample], metrics: StoreMetrics) -> Self {
        let mut took: Vec<Duration> = samples.iter().map(|s| s.took).collect();
        took.sort_unstable();
        let p99 = match took.len() {
            0 => Duration::ZERO,
            n => took[(n * 99).div_ceil(100) - 1],
        };
        Self {
            fault: fault.to_owned(),
            timeout,
            requests: samples.len(),
            p99,
            max: took.last().copied().unwrap_or_default(),
            errors: samples.iter().filter(|s| !s.documented()).count(),
            fallback: samples.iter().filter(|s| s.fallback()).count(),
            metrics,
        }
    }

    /// The one-line summary, a row of the table in docs/faults.md.
    pub fn line(&self) -> String {
        format!(
            "| {} | {} ms | {} | {:.1} ms | {:.1} ms | {} | {} | {} / {} / {} |",
            self.fault,
            self.timeout.as_millis(),
            self.requests,
            self.p99.as_secs_f64() * 1e3,
            self.max.as_secs_f64() * 1e3,
            self.errors,
            self.fallback,
            self.metrics.fallback,
            self.metrics.errors,
            self.metrics.timeouts,
        )
    }

    /// Prints the line (prefixed `fault summary:`, to collect them).
    pub fn print(&self) {
        eprintln!("fault summary: {}", self.line());
    }

    /// The guards: some load ran, no answer but the documented ones, none
    /// slower than the timeout plus [`MARGIN`] plus how long the control
    /// (an instance on the memory store, which never waits for Redis) took
    /// for its requests in flight meanwhile: on a starved machine every
    /// process is slow, and that is no wait for Redis. Panics with the
    /// offending requests and `log`.
    pub fn assert_guards(&self, samples: &[&Sample], control: &[&Sample], log: &str) {
        assert!(self.requests > 0, "{}: no load ran", self.fault);
        let stall = |s: &Sample| {
            let end = s.sent + s.took;
            control
                .iter()
                .filter(|c| c.sent <= end && c.sent + c.took >= s.sent)
                .map(|c| c.took)
                .max()
                .unwrap_or_default()
        };
        let bad: Vec<(Duration, &&Sample)> = samples
            .iter()
            .map(|s| (stall(s), s))
            .filter(|(stall, s)| !s.documented() || s.took > self.timeout + MARGIN + *stall)
            .collect();
        assert!(
            bad.is_empty(),
            "{}: {} of {} requests failed a guard (an answer other than 200/429, or slower than {:?} + {MARGIN:?} + the control's latency meanwhile); the first ones (control latency, request): {:?}\nlog:\n{log}",
            self.fault,
            bad.len(),
            self.requests,
            self.timeout,
            &bad[..bad.len().min(10)],
        );
    }
}

/// A TCP proxy on a loopback port that forwards each chunk it reads, in
/// each direction, after a fixed delay (changeable at any time; a chunk
/// keeps the delay in force when it was read, and order is kept). At most
/// 64 chunks of 16 KiB wait per direction and connection: a full queue
/// stops reading. Stopped, with its connections, on drop.
#[derive(Debug)]
pub struct DelayProxy {
    /// Where it listens.
    pub addr: SocketAddr,
    delay_us: Arc<AtomicU64>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl DelayProxy {
    /// A proxy to `upstream`, with no delay yet.
    pub fn start(upstream: SocketAddr) -> Self {
        let delay_us = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let delay = delay_us.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind the proxy");
                ready_tx.send(listener.local_addr().expect("addr")).unwrap();
                let mut stopped = stopped;
                loop {
                    tokio::select! {
                        accepted = listener.accept() => {
                            let Ok((conn, _)) = accepted else { continue };
                            tokio::spawn(proxy_connection(conn, upstream, delay.clone()));
                        }
                        _ = &mut stopped => break,
                    }
                }
            });
        });
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the proxy started");
        Self {
            addr,
            delay_us,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// `redis://` at the proxy.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Delays each chunk by `each_way` from now on (a round trip through
    /// the proxy takes twice that longer).
    pub fn set_delay(&self, each_way: Duration) {
        let us = u64::try_from(each_way.as_micros()).unwrap_or(u64::MAX);
        self.delay_us.store(us, Ordering::SeqCst);
    }
}

impl Drop for DelayProxy {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

async fn proxy_connection(
    client: tokio::net::TcpStream,
    upstream: SocketAddr,
    delay: Arc<AtomicU64>,
) {
    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    tokio::join!(
        delayed_pipe(client_read, server_write, delay.clone()),
        delayed_pipe(server_read, client_write, delay),
    );
}

async fn delayed_pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay_us: Arc<AtomicU64>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(64);
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let due = tokio::time::Instant::now()
                + Duration::from_micros(delay_us.load(Ordering::SeqCst));
            if tx.send((due, buf[..n].to_vec())).await.is_err() {
                break;
            }
        }
    };
    let write = async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(read, write);
}
