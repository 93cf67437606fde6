//! A load generator for an Envoy Rate Limit Service: `CONCURRENCY` gRPC calls
//! in flight on one HTTP/2 connection each, for `SECONDS`, over `KEYS`
//! distinct `remote_address` descriptors. Prints throughput and latency
//! (p50, p99, p99.9 and the slowest call), and with `RLS_LOAD_SLOW_MS=N`
//! when each call slower than N ms started (ms from the start), to see
//! whether slow calls come together.
//!
//! `rls_load ADDR [SECONDS] [CONCURRENCY] [KEYS]`

use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:8081".into());
    let secs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let concurrency: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(64);
    let keys: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let begin = Instant::now();
    let deadline = begin + Duration::from_secs(secs);
    let mut tasks = Vec::new();
    for t in 0..concurrency {
        let client = RateLimitServiceClient::connect(format!("http://{addr}")).await?;
        tasks.push(tokio::spawn(async move {
            let begin = begin;
            let mut client = client;
            let mut latencies = Vec::new();
            let mut over = 0u64;
            let mut error = None;
            let mut i = t;
            while Instant::now() < deadline {
                i = (i + concurrency) % keys;
                let request = RateLimitRequest {
                    domain: "edge_proxy".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "remote_address".into(),
                            value: format!("10.0.{}.{}", i / 256, i % 256),
                        }],
                        ..Default::default()
                    }],
                    hits_addend: 1,
                };
                let start = Instant::now();
                let since = start.duration_since(begin);
                match client.should_rate_limit(request).await {
                    Ok(r) if r.get_ref().overall_code == 2 => over += 1,
                    Ok(_) => {}
                    Err(e) => {
                        // A failing server stops this caller; say so.
                        error = Some(e.to_string());
                        break;
                    }
                }
                latencies.push((start.elapsed(), since));
            }
            (latencies, over, error)
        }));
    }
    let mut all = Vec::new();
    let mut over = 0;
    let mut errors = 0;
    for t in tasks {
        let (l, o, e) = t.await?;
        all.extend(l);
        over += o;
        if let Some(e) = e {
            if errors == 0 {
                eprintln!("rls_load: a call failed: {e}");
            }
            errors += 1;
        }
    }
    report_slow(&all);
    let mut all: Vec<Duration> = all.into_iter().map(|(l, _)| l).collect();
    all.sort();
    let pct = |p: f64| all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)));
    println!(
        "calls: {}  over_limit: {over}  failed_callers: {errors}  throughput: {:.0}/s  p50: {:?}  p99: {:?}  p99.9: {:?}  max: {:?}",
        all.len(),
        all.len() as f64 / secs as f64,
        pct(0.50).copied().unwrap_or_default(),
        pct(0.99).copied().unwrap_or_default(),
        pct(0.999).copied().unwrap_or_default(),
        all.last().copied().unwrap_or_default(),
    );
    Ok(())
}

/// With `RLS_LOAD_SLOW_MS=N`: when each call slower than N ms started.
fn report_slow(all: &[(Duration, Duration)]) {
    let Some(ms) = std::env::var("RLS_LOAD_SLOW_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let mut slow: Vec<(Duration, Duration)> = all
        .iter()
        .filter(|(l, _)| *l >= Duration::from_millis(ms))
        .map(|(l, at)| (*at, *l))
        .collect();
    slow.sort();
    for (at, l) in slow {
        eprintln!(
            "slow call at {} ms: {:.1} ms",
            at.as_millis(),
            l.as_secs_f64() * 1e3
        );
    }
}
