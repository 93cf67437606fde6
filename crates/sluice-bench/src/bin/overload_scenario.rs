//! The overload scenario: Sluice in proxy mode in front of an upstream
//! whose capacity drops mid-run, with two classes of clients, `free` and
//! `enterprise`. Not a test: `scripts/bench-overload` runs it against
//! `sluice serve` with and without `[overload]` and plots the result.
//!
//! `overload_scenario UPSTREAM_ADDR SLUICE_URL [--secs S] [--degrade-at S]
//! [--degrade-for S] [--free N] [--enterprise N] [--out FILE]`
//!
//! It serves the upstream itself on `UPSTREAM_ADDR`: it answers after
//! `base` (20 ms) while at most `capacity` requests are in flight, and
//! after `base * in_flight / capacity` beyond (a processor-sharing
//! server); its capacity is 64, and 8 while degraded. The clients are
//! closed loops (the next request when the last one is answered, 100 ms
//! after a 503). It writes one CSV line per second and class (`second,
//! class, ok, shed, p50_ms, p99_ms`) to `--out`, and prints a JSON summary:
//! each class's p99 while healthy and while degraded, and its sheds.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;

const BASE: Duration = Duration::from_millis(20);
const CAPACITY: u64 = 64;
const DEGRADED_CAPACITY: u64 = 8;
const CLASSES: [(&str, &str); 2] = [("free", "free-key"), ("enterprise", "ent-key")];

struct Args {
    upstream: SocketAddr,
    sluice: String,
    secs: u64,
    degrade_at: u64,
    degrade_for: u64,
    clients: [usize; 2],
    out: String,
}

fn args() -> Result<Args, String> {
    let usage = "usage: overload_scenario UPSTREAM_ADDR SLUICE_URL [--secs S] [--degrade-at S] [--degrade-for S] [--free N] [--enterprise N] [--out FILE]";
    let mut it = std::env::args().skip(1);
    let upstream = it.next().ok_or(usage)?;
    let mut a = Args {
        upstream: upstream.parse().map_err(|e| format!("{upstream}: {e}"))?,
        sluice: it.next().ok_or(usage)?,
        secs: 30,
        degrade_at: 10,
        degrade_for: 10,
        clients: [40, 8],
        out: "overload.csv".into(),
    };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--secs" => a.secs = num()?,
            "--degrade-at" => a.degrade_at = num()?,
            "--degrade-for" => a.degrade_for = num()?,
            "--free" => a.clients[0] = num()? as usize,
            "--enterprise" => a.clients[1] = num()? as usize,
            "--out" => a.out = v,
            _ => return Err(format!("unknown flag {flag}\n{usage}")),
        }
    }
    Ok(a)
}

/// The upstream's state.
struct Upstream {
    started: Instant,
    degraded: (Duration, Duration),
    in_flight: AtomicU64,
}

async fn serve(State(u): State<Arc<Upstream>>) -> &'static str {
    let n = u.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let t = u.started.elapsed();
    let capacity = if t >= u.degraded.0 && t < u.degraded.1 {
        DEGRADED_CAPACITY
    } else {
        CAPACITY
    };
    let wait = BASE.mul_f64((n as f64 / capacity as f64).max(1.0));
    tokio::time::sleep(wait).await;
    u.in_flight.fetch_sub(1, Ordering::SeqCst);
    "{\"ok\":true}"
}

/// One answer: when it was sent (ms from the start), its class, whether it
/// was shed, and its latency.
type Sample = (u64, usize, bool, u64);

async fn client(
    http: reqwest::Client,
    url: String,
    class: usize,
    started: Instant,
    until: Instant,
    samples: Arc<parking_lot::Mutex<Vec<Sample>>>,
) {
    while Instant::now() < until {
        let sent = Instant::now();
        let r = http
            .get(&url)
            .header("x-api-key", CLASSES[class].1)
            .send()
            .await;
        let status = match r {
            Ok(r) => {
                let s = r.status().as_u16();
                let _ = r.bytes().await;
                s
            }
            Err(_) => 0,
        };
        let took = sent.elapsed().as_micros() as u64;
        let at = sent.duration_since(started).as_millis() as u64;
        samples.lock().push((at, class, status == 503, took));
        if status != 200 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

/// Per second and class: ok, shed, p50 and p99 (ms) of the admitted.
fn buckets(samples: &[Sample], secs: u64) -> Vec<(u64, usize, usize, usize, f64, f64)> {
    let mut rows = Vec::new();
    for s in 0..secs {
        for class in 0..CLASSES.len() {
            let of = |shed: bool| {
                samples
                    .iter()
                    .filter(move |x| x.0 / 1000 == s && x.1 == class && x.2 == shed)
            };
            let mut lat: Vec<u64> = of(false).map(|x| x.3).collect();
            lat.sort_unstable();
            let p50 = percentile(&lat, 0.5);
            let p99 = percentile(&lat, 0.99);
            rows.push((s, class, lat.len(), of(true).count(), p50, p99));
        }
    }
    rows
}

/// A class's p99 (ms) and sheds over `[from, to)` seconds.
fn phase(samples: &[Sample], class: usize, from: u64, to: u64) -> (f64, usize, usize) {
    let within = samples
        .iter()
        .filter(|x| x.1 == class && x.0 >= from * 1000 && x.0 < to * 1000);
    let mut lat: Vec<u64> = within.clone().filter(|x| !x.2).map(|x| x.3).collect();
    lat.sort_unstable();
    (
        percentile(&lat, 0.99),
        lat.len(),
        within.filter(|x| x.2).count(),
    )
}

#[tokio::main]
async fn main() {
    let a = args().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let started = Instant::now();
    let upstream = Arc::new(Upstream {
        started,
        degraded: (
            Duration::from_secs(a.degrade_at),
            Duration::from_secs(a.degrade_at + a.degrade_for),
        ),
        in_flight: AtomicU64::new(0),
    });
    let listener = tokio::net::TcpListener::bind(a.upstream)
        .await
        .expect("bind the upstream");
    let app = Router::new().fallback(serve).with_state(upstream);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(256)
        .timeout(Duration::from_secs(10))
        .build()
        .expect("client");
    let url = format!("{}/work", a.sluice.trim_end_matches('/'));
    let until = started + Duration::from_secs(a.secs);
    let samples = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (class, &n) in a.clients.iter().enumerate() {
        for _ in 0..n {
            let (http, url, samples) = (http.clone(), url.clone(), samples.clone());
            tasks.push(tokio::spawn(client(
                http, url, class, started, until, samples,
            )));
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    let samples = samples.lock().clone();
    let mut csv = String::from("second,class,ok,shed,p50_ms,p99_ms\n");
    for (s, class, ok, shed, p50, p99) in buckets(&samples, a.secs) {
        csv.push_str(&format!(
            "{s},{},{ok},{shed},{p50:.1},{p99:.1}\n",
            CLASSES[class].0
        ));
    }
    std::fs::write(&a.out, csv).expect("write the CSV");
    // Phases, each without its first second (the transition).
    let (h0, h1) = (1, a.degrade_at);
    let (d0, d1) = (a.degrade_at + 1, a.degrade_at + a.degrade_for);
    let mut summary = serde_json::Map::new();
    for (class, (name, _)) in CLASSES.iter().enumerate() {
        let (hp99, hok, hshed) = phase(&samples, class, h0, h1);
        let (dp99, dok, dshed) = phase(&samples, class, d0, d1);
        let (rp99, rok, rshed) = phase(&samples, class, d1 + 2, a.secs);
        summary.insert(
            (*name).to_owned(),
            serde_json::json!({
                "healthy": {"p99_ms": hp99, "ok": hok, "shed": hshed},
                "degraded": {"p99_ms": dp99, "ok": dok, "shed": dshed},
                "recovered": {"p99_ms": rp99, "ok": rok, "shed": rshed},
            }),
        );
    }
    println!("{}", serde_json::Value::Object(summary));
}
