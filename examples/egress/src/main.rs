//! Calling a partner API within its quota.
//!
//! `cargo run -p sluice-example-egress -- URL [CALLS]` sends CALLS (default
//! 20) concurrent GETs to URL, at most 5 a second with bursts of 5, each
//! waiting up to 10 s for its turn, and prints what came back.

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
    let calls: usize = args.next().and_then(|n| n.parse().ok()).unwrap_or(20);

    // The partner's quota: 5 calls a second.
    let quota = LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(5),
        burst: 5,
        nodelay: true,
    };
    let client = RateLimitedClient::new(
        reqwest::Client::new(),
        Arc::new(EgressLimiter::new(&quota)?),
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
