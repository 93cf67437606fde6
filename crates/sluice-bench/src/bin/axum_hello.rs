//! A hello-world axum app, bare or behind Sluice's tower layer, on one
//! runtime thread: the configurations `scripts/bench-axum-overhead` compares.
//!
//! `axum_hello ADDR [MODE]`, where MODE is one of:
//!
//! - `bare` (the default): the app alone;
//! - `one-limit`: `Router::layer` with the example app's limit (per client
//!   IP), as `examples/axum-app` applies it;
//! - `one-limit-refusals-only`: the same, with the rate-limit fields sent on
//!   refusals only (`[headers] on_admitted = false`);
//! - `two-limits`: the same with two limits (per client IP and per API key);
//! - `global-and-ip`: the same with a global cap (one key for every
//!   request) beside the per-IP limit;
//! - `around`: the one limit as a layer around the whole router (served
//!   through `axum::ServiceExt`), which spares axum's per-route wrapping;
//! - `identity-layer`: a control, `Router::layer` with a layer that adds
//!   nothing (what any axum layer costs);
//! - `fields-only`: a control, no limiter, the same two response fields,
//!   fixed (what the larger response costs).
//! - `tower-governor`: the peer, tower_governor's `GovernorLayer` with the
//!   one limit's quota (per peer IP, 100,000,000/s, burst 100,000,000) and
//!   its rate-limit headers on every response (`use_headers`), applied as
//!   the one limit is;
//! - `tower-governor-bare`: the same without its headers (tower_governor's
//!   default: headers only on a refusal).

use std::net::SocketAddr;

use axum::http::HeaderValue;
use axum::{Router, ServiceExt, routing::get};
use sluice_bench::layer_configs::{GLOBAL_AND_IP, ONE_LIMIT, ONE_LIMIT_REFUSALS_ONLY, TWO_LIMITS};
use sluice_http::RateLimitLayer;
use tower_layer::Layer;

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
    let mode = args.next().unwrap_or_else(|| "bare".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let app = Router::new().route("/", get(|| async { "hello\n" }));
        let app = match mode.as_str() {
            "bare" => app,
            "one-limit" => app.layer(RateLimitLayer::from_toml(ONE_LIMIT)?),
            "one-limit-refusals-only" => {
                app.layer(RateLimitLayer::from_toml(ONE_LIMIT_REFUSALS_ONLY)?)
            }
            "two-limits" => app.layer(RateLimitLayer::from_toml(TWO_LIMITS)?),
            "global-and-ip" => app.layer(RateLimitLayer::from_toml(GLOBAL_AND_IP)?),
            "tower-governor" => app.layer(tower_governor::GovernorLayer::new(
                peer_quota()
                    .use_headers()
                    .finish()
                    .ok_or("a tower_governor config")?,
            )),
            "tower-governor-bare" => app.layer(tower_governor::GovernorLayer::new(
                peer_quota().finish().ok_or("a tower_governor config")?,
            )),
            "identity-layer" => app.layer(tower_layer::layer_fn(|s| s)),
            "fields-only" => app.layer(axum::middleware::map_response(
                |mut response: axum::response::Response| async move {
                    let h = response.headers_mut();
                    h.insert("ratelimit-policy", FIXED_POLICY.clone());
                    h.insert("ratelimit", FIXED_FIELD.clone());
                    response
                },
            )),
            "around" => {
                let app = RateLimitLayer::from_toml(ONE_LIMIT)?.layer(app);
                let listener = tokio::net::TcpListener::bind(addr).await?;
                eprintln!("axum_hello: listening on {addr} ({mode})");
                let make =
                    ServiceExt::<axum::extract::Request>::into_make_service_with_connect_info::<
                        SocketAddr,
                    >(app);
                axum::serve(listener, make).await?;
                return Ok(());
            }
            other => return Err(format!("unknown mode `{other}`").into()),
        };
        let listener = tokio::net::TcpListener::bind(addr).await?;
        eprintln!("axum_hello: listening on {addr} ({mode})");
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await?;
        Ok(())
    })
}

/// tower_governor's builder with `ONE_LIMIT`'s quota: one request every
/// 10 ns (100,000,000/s), a burst of as many, per peer IP.
fn peer_quota() -> tower_governor::governor::GovernorConfigBuilder<
    tower_governor::key_extractor::PeerIpKeyExtractor,
    governor::middleware::NoOpMiddleware<governor::clock::QuantaInstant>,
> {
    let mut builder = tower_governor::governor::GovernorConfigBuilder::default();
    builder.per_nanosecond(10).burst_size(100_000_000);
    builder
}
