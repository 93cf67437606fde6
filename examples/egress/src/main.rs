//! Calling a partner API within its quota.
//!
//! `cargo run -p sluice-example-egress -- URL [CALLS] [--redis REDIS_URL]`
//! sends CALLS (default 20) concurrent GETs to URL, at most 5 a second with
//! bursts of 5, each waiting up to 10 s for its turn, and prints what came
//! back. With `--redis`, the quota is counted in Redis: every process run
//! with the same Redis and `SLUICE_KEY_SECRET` shares the 5 a second.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_egress::{EgressLimiter, RateLimitedClient};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let url = args
        .next()
        .unwrap_or_else(|| "http://127.0.0.1:8000/".into());
    let rest: Vec<String> = args.collect();
    let calls: usize = rest.first().and_then(|n| n.parse().ok()).unwrap_or(20);
    let redis = rest
        .iter()
        .position(|a| a == "--redis")
        .and_then(|i| rest.get(i + 1));

    // The partner's quota: 5 calls a second.
    let quota = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(5),
        burst: 5,
        nodelay: true,
    };
    let mut limiter = EgressLimiter::new(&quota)?;
    if let Some(url) = redis {
        // A call out may wait its turn anyway, so give Redis time to answer
        // before the local fallback (which knows nothing of the other
        // processes) decides instead.
        let options = sluice_redis::ProtectOptions {
            timeout: Duration::from_millis(500),
            ..Default::default()
        };
        let store = sluice_redis::shared(url.parse()?, true, options);
        store.connect(Duration::from_secs(2)).await?;
        let secret = std::env::var("SLUICE_KEY_SECRET").unwrap_or_default();
        limiter = limiter.with_shared_store(store, secret.as_bytes());
    }
    let client = RateLimitedClient::new(
        reqwest::Client::new(),
        Arc::new(limiter),
        Duration::from_secs(10),
    );

    let start = Instant::now();
    let tasks: Vec<_> = (0..calls)
        .map(|i| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move { (i, client.get(&url).await.map(|r| r.status())) })
        })
        .collect();
    for task in tasks {
        let (i, result) = task.await?;
        match result {
            Ok(status) => println!(
                "{:>6.2}s call {i:>3}: {status}",
                start.elapsed().as_secs_f64()
            ),
            Err(e) => println!("{:>6.2}s call {i:>3}: {e}", start.elapsed().as_secs_f64()),
        }
    }
    Ok(())
}
