//! A small axum service rate limited by Sluice.
//!
//! `cargo run -p sluice-example-axum` then
//! `curl -i http://127.0.0.1:3000/` (the 11th request within a second is 429).
//! `SLUICE_EXAMPLE_ADDR` changes the address.

use std::net::SocketAddr;

use axum::{Router, routing::get};
use sluice_http::RateLimitLayer;

/// Per client IP: 5 requests a second, bursts of 10.
const LIMITS: &str = r#"
    [[limits]]
    name = "per-ip"
    key = "ip"
    rate = "5/s"
    burst = 10
"#;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let addr = std::env::var("SLUICE_EXAMPLE_ADDR").unwrap_or_else(|_| "127.0.0.1:3000".into());

    // The five lines that add Sluice:
    let limits = RateLimitLayer::from_toml(LIMITS)?;
    let app = Router::new()
        .route("/", get(|| async { "hello\n" }))
        .layer(limits);
    let listener = tokio::net::TcpListener::bind(&addr).await?;

    eprintln!("axum-app: listening on http://{}", listener.local_addr()?);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .await?;
    Ok(())
}
