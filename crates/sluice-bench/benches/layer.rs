//! The tower layer's own cost per request, without sockets: one request
//! through an inner service that answers at once, with and without the
//! layer (the example app's one limit, two limits, and a global cap beside
//! a per-IP limit). The difference is
//! what the layer adds; `scripts/bench-axum-overhead` measures the same over
//! real HTTP.
//!
//! `cargo bench -p sluice-bench --bench layer`

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::net::SocketAddr;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Request, Response};
use criterion::{Criterion, criterion_group, criterion_main};
use sluice_bench::layer_configs::{GLOBAL_AND_IP, ONE_LIMIT, TWO_LIMITS};
use sluice_http::RateLimitLayer;
use tower_layer::Layer;
use tower_service::Service;

/// An inner service that answers `hello` at once.
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
        ready(Ok(Response::new(Body::from("hello\n"))))
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

/// Calls the service once and polls its future (ready at once) to the end.
fn once<S>(svc: &mut S) -> usize
where
    S: Service<Request<Body>, Response = Response<Body>>,
{
    let mut cx = Context::from_waker(Waker::noop());
    let _ = svc.poll_ready(&mut cx);
    let mut fut = pin!(svc.call(request()));
    match fut.as_mut().poll(&mut cx) {
        Poll::Ready(Ok(r)) => r.headers().len(),
        _ => 0,
    }
}

fn layer(c: &mut Criterion) {
    let mut g = c.benchmark_group("layer");
    let mut bare = Hello;
    g.bench_function("bare", |b| b.iter(|| black_box(once(&mut bare))));
    let mut one = RateLimitLayer::from_toml(ONE_LIMIT).unwrap().layer(Hello);
    assert!(once(&mut one) >= 2, "the layer adds its fields");
    g.bench_function("one_limit", |b| b.iter(|| black_box(once(&mut one))));
    let mut two = RateLimitLayer::from_toml(TWO_LIMITS).unwrap().layer(Hello);
    g.bench_function("two_limits", |b| b.iter(|| black_box(once(&mut two))));
    let mut global = RateLimitLayer::from_toml(GLOBAL_AND_IP)
        .unwrap()
        .layer(Hello);
    g.bench_function("global_and_ip", |b| b.iter(|| black_box(once(&mut global))));
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .sample_size(40);
    targets = layer
}
criterion_main!(benches);
