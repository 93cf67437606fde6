//! Load on the Redis store: `CONCURRENCY` tokio tasks, each doing one
//! decision after another over `KEYS` client keys, for `SECONDS`, against the
//! Redis deployment at `URL` (any store URL: a single node, shards,
//! Cluster, Sentinel). Runs the batched store, then the baseline (one script
//! call per request, still pipelined on one multiplexed connection), and
//! prints decisions/s and latency percentiles for each.
//!
//! `redis_load [URL] [SECONDS] [CONCURRENCY] [KEYS] [ALGORITHM] [MODE] [RATE] [BURST]`
//!
//! MODE is `both` (default), `batched` or `baseline`. The batching can be
//! tuned with `SLUICE_BATCH_GROUPS` and `SLUICE_BATCH_IN_FLIGHT`
//! (defaults: [`BatchConfig::default`]); `SLUICE_BENCH_THREADS` sets the
//! client's tokio worker threads (default 0: a current-thread runtime,
//! leaving the other core to Redis). ALGORITHM is a
//! sluice-core name (`gcra` by default). The limit is RATE (default
//! `1000/s`) with a burst of BURST (default 1000; 100 for the sliding log)
//! per key, so nearly every decision is an admission that writes. At
//! 1000/s a key is full again 1 ms after a request, so its state expires
//! between two visits and each decision creates it anew ("cold" keys);
//! `10/min` keeps every key's state alive ("hot" keys).

use std::time::{Duration, Instant};

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_redis::topology::Topology;
use sluice_redis::{BatchConfig, RedisCheck, RedisStore, StoreUrl};
use sluice_store::KeyHasher;

struct Run {
    decisions: u64,
    allowed: u64,
    errors: u64,
    latencies_us: Vec<u32>,
    elapsed: Duration,
}

fn algorithm(name: &str) -> Option<AlgorithmKind> {
    AlgorithmKind::ALL.into_iter().find(|k| k.name() == name)
}

/// What one run does.
struct Load {
    url: String,
    secs: u64,
    concurrency: usize,
    keys: usize,
    kind: AlgorithmKind,
    rate: Rate,
    burst: u64,
}

async fn run(
    load: &Load,
    batching: Option<BatchConfig>,
) -> Result<Run, Box<dyn std::error::Error>> {
    let Load {
        ref url,
        secs,
        concurrency,
        keys,
        kind,
        rate,
        burst,
    } = *load;
    let topology = Topology::connect(&url.parse::<StoreUrl>()?).await?;
    let store = RedisStore::with_batching(topology, batching);
    let limiter = LimitSpec {
        algorithm: kind,
        rate,
        burst,
        nodelay: true,
    }
    .build()?;
    let hasher = KeyHasher::from_secret(b"redis_load");
    let ids: Vec<_> = (0..keys)
        .map(|i| hasher.key_id(&format!("client-{i}")))
        .collect();
    let ids = std::sync::Arc::new(ids);
    // A fresh limit per run, so that no run inherits another's spent quota.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let limit_id: std::sync::Arc<str> = format!(
        "redis_load-{}-{}",
        std::process::id(),
        RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
    .into();
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let (store, ids, limit_id) = (store.clone(), ids.clone(), limit_id.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(1 << 16);
            let (mut allowed, mut errors) = (0u64, 0u64);
            let mut i = t;
            while Instant::now() < deadline {
                i = (i + concurrency) % ids.len();
                let check = RedisCheck {
                    limit_id: &limit_id,
                    limiter: &limiter,
                    key: ids[i],
                    cost: 1,
                    reserve: 0,
                };
                let begin = Instant::now();
                match store.check(&[check]).await {
                    Ok(c) => allowed += u64::from(c.allowed),
                    Err(_) => errors += 1,
                }
                lat.push(u32::try_from(begin.elapsed().as_micros()).unwrap_or(u32::MAX));
            }
            (lat, allowed, errors)
        }));
    }
    let mut out = Run {
        decisions: 0,
        allowed: 0,
        errors: 0,
        latencies_us: Vec::new(),
        elapsed: Duration::ZERO,
    };
    for task in tasks {
        let (lat, allowed, errors) = task.await?;
        out.decisions += lat.len() as u64;
        out.allowed += allowed;
        out.errors += errors;
        out.latencies_us.extend(lat);
    }
    out.elapsed = start.elapsed();
    Ok(out)
}

fn report(name: &str, mut r: Run) -> f64 {
    r.latencies_us.sort_unstable();
    let pct = |p: f64| {
        let n = r.latencies_us.len();
        if n == 0 {
            return 0;
        }
        r.latencies_us[((n as f64 * p) as usize).min(n - 1)]
    };
    let rate = r.decisions as f64 / r.elapsed.as_secs_f64();
    println!(
        "{name:>20}: {rate:>10.0} decisions/s  p50 {:>6} us  p99 {:>6} us  allowed {:.1}%  errors {}",
        pct(0.50),
        pct(0.99),
        100.0 * r.allowed as f64 / r.decisions.max(1) as f64,
        r.errors
    );
    rate
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // SLUICE_BENCH_THREADS: tokio worker threads (0: one, on this thread).
    let threads: usize = std::env::var("SLUICE_BENCH_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let runtime = if threads == 0 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .enable_all()
            .build()?
    };
    runtime.block_on(bench())
}

/// The batching to measure: the defaults, or `SLUICE_BATCH_GROUPS` and
/// `SLUICE_BATCH_IN_FLIGHT`.
fn batch_config() -> BatchConfig {
    let defaults = BatchConfig::default();
    let env = |name: &str, default: usize| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    BatchConfig {
        max_groups: env("SLUICE_BATCH_GROUPS", defaults.max_groups),
        max_in_flight: env("SLUICE_BATCH_IN_FLIGHT", defaults.max_in_flight),
    }
}

async fn bench() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(256);
    let keys: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let kind = args
        .next()
        .map_or(Some(AlgorithmKind::Gcra), |a| algorithm(&a))
        .ok_or("unknown algorithm")?;
    let mode = args.next().unwrap_or_else(|| "both".into());
    let rate: Rate = args.next().as_deref().unwrap_or("1000/s").parse()?;
    let default_burst = if kind == AlgorithmKind::SlidingLog {
        100
    } else {
        1000
    };
    let burst: u64 = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(default_burst);
    println!(
        "{url}: {concurrency} tasks, {keys} keys, {secs} s each, {} {rate} burst {burst}",
        kind.name()
    );
    let load = Load {
        url,
        secs,
        concurrency,
        keys,
        kind,
        rate,
        burst,
    };
    let mut batched = None;
    let mut baseline = None;
    if mode == "both" || mode == "batched" {
        let config = batch_config();
        println!("batching: {config:?}");
        let r = run(&load, Some(config)).await?;
        let max = report("batched", r);
        batched = Some(max);
        // Latency at half the measured maximum: fewer tasks, doubling
        // until the throughput reaches half of it.
        let mut tasks = 8;
        while tasks < load.concurrency {
            let half = Load {
                concurrency: tasks,
                url: load.url.clone(),
                ..load
            };
            let r = run(&half, Some(config)).await?;
            let rate = r.decisions as f64 / r.elapsed.as_secs_f64();
            if rate >= max / 2.0 {
                report(
                    &format!("{tasks} tasks, {:.0}% of max", 100.0 * rate / max),
                    r,
                );
                break;
            }
            tasks *= 2;
        }
    }
    if mode == "both" || mode == "baseline" {
        let r = run(&load, None).await?;
        baseline = Some(report("baseline", r));
    }
    if let (Some(b), Some(s)) = (batched, baseline) {
        println!("batched / baseline: {:.2}x", b / s);
    }
    Ok(())
}
