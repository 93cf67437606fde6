//! What settlement and a concurrency slot add per request in the tower
//! layer, beside the plain limit, in one run: each request goes through
//! the layer to an inner service that answers at once, and its body is read
//! to the end (where a settlement starts), on a current-thread runtime that
//! also runs the settlements.
//!
//! - `plain`: one token bucket per API key (the layer's at-once path);
//! - `settled`: the same limit with `settle = { from = "reported" }`, an
//!   estimate of 2, the handler reporting 1: one refund per request;
//! - `slot`: a concurrency limit per API key: a slot taken and given back.
//!
//! `cargo bench -p sluice-bench --bench settle`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use criterion::{Criterion, criterion_group, criterion_main};
use http_body_util::BodyExt;
use sluice_http::RateLimitLayer;
use sluice_http::settling_body::ActualCost;
use tower_layer::Layer;
use tower_service::Service;

const PLAIN: &str = r#"
    [[limits]]
    name = "per-key"
    key = "header:X-Api-Key"
    rate = "100000000/s"
    cost = 2
"#;

const SETTLED: &str = r#"
    [[limits]]
    name = "per-key"
    key = "header:X-Api-Key"
    rate = "100000000/s"
    cost = 2
    settle = { from = "reported" }
"#;

const SLOT: &str = r#"
    [[limits]]
    name = "per-key"
    key = "header:X-Api-Key"
    algorithm = "concurrency"
    max_in_flight = 1000000
"#;

/// An inner service that answers `hello` at once, reporting a cost of 1.
#[derive(Clone)]
struct Hello;

impl Service<Request<Body>> for Hello {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Ready<Result<Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<Body>) -> Self::Future {
        let mut r = Response::new(Body::from("hello\n"));
        r.extensions_mut().insert(ActualCost(1));
        ready(Ok(r))
    }
}

fn request() -> Request<Body> {
    let mut req = Request::get("/")
        .header("host", "127.0.0.1:3000")
        .header("x-api-key", "bench-key")
        .body(Body::empty())
        .unwrap();
    let peer: SocketAddr = "127.0.0.1:40000".parse().unwrap();
    req.extensions_mut().insert(ConnectInfo(peer));
    req
}

/// One request through `svc`, its body read to the end.
async fn once<S>(svc: &mut S) -> usize
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    let Ok(response) = svc.call(request()).await else {
        return 0;
    };
    let status = response.status().as_u16();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes().len());
    usize::from(status) + body.unwrap_or(0)
}

fn settle(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut g = c.benchmark_group("settle");
    for (name, config) in [("plain", PLAIN), ("settled", SETTLED), ("slot", SLOT)] {
        let mut svc = RateLimitLayer::from_toml(config).unwrap().layer(Hello);
        assert_eq!(rt.block_on(once(&mut svc)), 200 + 6, "{name}: admitted");
        g.bench_function(name, |b| b.iter(|| black_box(rt.block_on(once(&mut svc)))));
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = settle
}
criterion_main!(benches);
