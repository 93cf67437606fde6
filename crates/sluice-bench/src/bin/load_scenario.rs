//! The load-test scenario: well-behaved clients stay within their plan while
//! one noisy client sends ten times the average, each on its own open-loop
//! schedule (a request every `1/rate`, whatever the answers), so a slow
//! server shows as latency, not as less load.
//!
//! `load_scenario URL [--good N] [--rate R] [--noisy-factor F] [--secs S] [--label L]`
//!
//! It prints one JSON line: requests and 429s of the good clients (the goal
//! is none), the noisy client's admitted rate, and latency percentiles over
//! every request. `scripts/load-test` runs it with and without Sluice in the
//! path, on the memory store and on Redis.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

#[derive(Debug, Default)]
struct Tally {
    sent: u64,
    limited: u64,
    errors: u64,
    latencies_us: Vec<u64>,
}

struct Args {
    url: String,
    good: usize,
    rate: f64,
    noisy_factor: f64,
    secs: f64,
    label: String,
}

fn args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        url: it.next().ok_or("usage: load_scenario URL [--good N] [--rate R] [--noisy-factor F] [--secs S] [--label L]")?,
        good: 50,
        rate: 5.0,
        noisy_factor: 10.0,
        secs: 15.0,
        label: "run".into(),
    };
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = || v.parse::<f64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--good" => a.good = num()? as usize,
            "--rate" => a.rate = num()?,
            "--noisy-factor" => a.noisy_factor = num()?,
            "--secs" => a.secs = num()?,
            "--label" => a.label = v,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(a)
}

async fn client(
    http: reqwest::Client,
    url: String,
    key: String,
    rate: f64,
    until: Instant,
    tally: Arc<Mutex<Tally>>,
) {
    let period = Duration::from_secs_f64(1.0 / rate);
    // Spread the clients' first requests over one period.
    let offset = period.mul_f64(fastrand_unit(&key));
    let mut next = Instant::now() + offset;
    let mut inflight = tokio::task::JoinSet::new();
    while next < until {
        tokio::time::sleep_until(next.into()).await;
        let (http, url, key, tally) = (http.clone(), url.clone(), key.clone(), tally.clone());
        inflight.spawn(async move {
            let started = Instant::now();
            let r = http.get(&url).header("X-Api-Key", key).send().await;
            let took = started.elapsed().as_micros() as u64;
            let mut t = tally.lock();
            t.sent += 1;
            t.latencies_us.push(took);
            match r {
                Ok(r) if r.status().as_u16() == 429 => t.limited += 1,
                Ok(r) if r.status().is_success() => {}
                _ => t.errors += 1,
            }
        });
        next += period;
    }
    while inflight.join_next().await.is_some() {}
}

/// A number in [0, 1) from a key, so runs are repeatable.
fn fastrand_unit(key: &str) -> f64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    (h >> 11) as f64 / (1u64 << 53) as f64
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(1024)
            .timeout(Duration::from_secs(10))
            .build()?;
        let until = Instant::now() + Duration::from_secs_f64(a.secs);
        let good = Arc::new(Mutex::new(Tally::default()));
        let noisy = Arc::new(Mutex::new(Tally::default()));
        let mut tasks = Vec::new();
        for i in 0..a.good {
            tasks.push(tokio::spawn(client(
                http.clone(),
                a.url.clone(),
                format!("good-client-{i}"),
                a.rate,
                until,
                good.clone(),
            )));
        }
        let noisy_rate = a.rate * a.noisy_factor;
        tasks.push(tokio::spawn(client(
            http.clone(),
            a.url.clone(),
            "noisy-client".into(),
            noisy_rate,
            until,
            noisy.clone(),
        )));
        for t in tasks {
            t.await?;
        }
        let (g, n) = (good.lock(), noisy.lock());
        let mut all: Vec<u64> = g
            .latencies_us
            .iter()
            .chain(&n.latencies_us)
            .copied()
            .collect();
        all.sort_unstable();
        let admitted_noisy = n.sent - n.limited - n.errors;
        let summary = serde_json::json!({
            "label": a.label,
            "seconds": a.secs,
            "good_clients": a.good,
            "good_rate": a.rate,
            "good_requests": g.sent,
            "good_429": g.limited,
            "good_429_share": if g.sent > 0 { g.limited as f64 / g.sent as f64 } else { 0.0 },
            "good_errors": g.errors,
            "noisy_rate_sent": noisy_rate,
            "noisy_requests": n.sent,
            "noisy_429": n.limited,
            "noisy_admitted_per_s": admitted_noisy as f64 / a.secs,
            "noisy_errors": n.errors,
            "latency_ms": {
                "p50": percentile(&all, 0.50),
                "p95": percentile(&all, 0.95),
                "p99": percentile(&all, 0.99),
            },
        });
        println!("{summary}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
