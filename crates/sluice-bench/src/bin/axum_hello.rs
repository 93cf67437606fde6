//! A hello-world axum app, bare or behind Sluice's tower layer, on one
//! runtime thread: the configurations `scripts/bench-axum-overhead` compares.
//!
//! `axum_hello ADDR [--with-sluice-one-limit | --with-sluice | --fields-only]`
//!
//! - `--with-sluice-one-limit`: the example app's limit (per client IP);
//! - `--with-sluice`: two limits (per client IP and per API key);
//! - `--fields-only`: no limiter, the same two response fields, fixed (a
//!   control for the cost of the larger response).

use std::net::SocketAddr;

use axum::http::HeaderValue;
use axum::{Router, routing::get};
use sluice_bench::layer_configs::{ONE_LIMIT, TWO_LIMITS};
use sluice_http::RateLimitLayer;

/// The fields Sluice sends under `TWO_LIMITS`, as fixed values.
static FIXED_POLICY: HeaderValue =
    HeaderValue::from_static(r#""ip-guard";q=100000000;w=1, "per-key";q=100000000;w=1"#);
static FIXED_FIELD: HeaderValue =
    HeaderValue::from_static(r#""ip-guard";r=99999999;t=1, "per-key";r=99999999;t=1"#);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr: SocketAddr = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:3000".into())
        .parse()?;
    let flags: Vec<String> = args.collect();
    let with_sluice = flags.iter().any(|a| a == "--with-sluice");
    let with_one = flags.iter().any(|a| a == "--with-sluice-one-limit");
    // A control: the same two fields, fixed, and no limiter: what the
    // larger response alone costs.
    let fields_only = flags.iter().any(|a| a == "--fields-only");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let mut app = Router::new().route("/", get(|| async { "hello\n" }));
        if with_sluice {
            app = app.layer(RateLimitLayer::from_toml(TWO_LIMITS)?);
        } else if with_one {
            app = app.layer(RateLimitLayer::from_toml(ONE_LIMIT)?);
        } else if fields_only {
            app = app.layer(axum::middleware::map_response(
                |mut response: axum::response::Response| async move {
                    let h = response.headers_mut();
                    h.insert("ratelimit-policy", FIXED_POLICY.clone());
                    h.insert("ratelimit", FIXED_FIELD.clone());
                    response
                },
            ));
        }
        let listener = tokio::net::TcpListener::bind(addr).await?;
        if flags.iter().any(|a| a == "--around") {
            use axum::ServiceExt;
            use tower_layer::Layer;
            let app = RateLimitLayer::from_toml(ONE_LIMIT)?.layer(Router::new().route("/", get(|| async { "hello\n" })));
            axum::serve(listener, ServiceExt::<axum::extract::Request>::into_make_service_with_connect_info::<SocketAddr>(app)).await?;
            return Ok(());
        }
        eprintln!("axum_hello: listening on {addr} (sluice: {with_sluice})");
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await?;
        Ok(())
    })
}
