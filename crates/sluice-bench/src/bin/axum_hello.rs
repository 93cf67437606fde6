//! A hello-world axum app, bare or behind Sluice's tower layer, on one
//! runtime thread: the two sides of `scripts/bench-axum-overhead`.
//!
//! `axum_hello ADDR [--with-sluice]`

use std::net::SocketAddr;

use axum::{Router, routing::get};
use sluice_http::RateLimitLayer;

/// Two limits that never refuse under the benchmark, so every request pays
/// for two checks and the response fields: per client IP and per API key.
const LIMITS: &str = r#"
    [[limits]]
    name = "ip-guard"
    key = "ip"
    algorithm = "gcra"
    rate = "100000000/s"

    [[limits]]
    name = "per-key"
    key = "header:X-Api-Key"
    algorithm = "token_bucket"
    rate = "100000000/s"
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()?;
    let with_sluice = args.any(|a| a == "--with-sluice");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut app = Router::new().route("/", get(|| async { "hello\n" }));
        if with_sluice {
            app = app.layer(RateLimitLayer::from_toml(LIMITS)?);
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("axum_hello: listening on {addr} (sluice: {with_sluice})");
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await?;
        Ok(())
    })
}
