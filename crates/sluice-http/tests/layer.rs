//! The tower layer in an axum app served over real HTTP, and around a bare
//! tower service.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::Ready;
use std::net::SocketAddr;
use std::task::{Context, Poll};

use axum::extract::Extension;
use axum::{Router, routing::get};
use http::{Request, Response, StatusCode};
use sluice_http::RateLimitLayer;
use sluice_policy::Verdict;
use tower_layer::Layer;
use tower_service::Service;

#[path = "layer/settlement.rs"]
mod settlement;

const PER_IP: &str = r#"
    [[limits]]
    name = "per-ip"
    key = "ip"
    rate = "1/min"
    burst = 4
"#;

async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    format!("http://{addr}/")
}

async fn remaining(Extension(verdict): Extension<Verdict>) -> String {
    verdict.results[0].decision.remaining.to_string()
}

#[tokio::test]
async fn admits_the_burst_then_answers_429_with_the_fields() {
    let app = Router::new()
        .route("/", get(remaining))
        .layer(RateLimitLayer::from_toml(PER_IP).unwrap().with_verdict());
    let url = serve(app).await;
    let client = reqwest::Client::new();
    for left in (0..4).rev() {
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()["ratelimit"],
            format!("\"per-ip\";r={left};t={}", 60 * (4 - left))
        );
        // The handler saw its verdict.
        assert_eq!(r.text().await.unwrap(), left.to_string());
    }
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(r.headers()["retry-after"], "60");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["violated-policies"][0], "per-ip");
}

#[tokio::test]
async fn the_verdict_reaches_the_handler_only_when_asked_for() {
    async fn has_verdict(req: axum::extract::Request) -> &'static str {
        match req.extensions().get::<Verdict>() {
            Some(_) => "verdict",
            None => "none",
        }
    }
    let client = reqwest::Client::new();
    for (layer, want) in [
        (RateLimitLayer::from_toml(PER_IP).unwrap(), "none"),
        (
            RateLimitLayer::from_toml(PER_IP).unwrap().with_verdict(),
            "verdict",
        ),
    ] {
        let url = serve(Router::new().route("/", get(has_verdict)).layer(layer)).await;
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().contains_key("ratelimit"), "fields either way");
        assert_eq!(r.text().await.unwrap(), want);
    }
}

#[tokio::test]
async fn clones_of_the_layer_share_one_count() {
    let layer = RateLimitLayer::from_toml(PER_IP).unwrap();
    let a = serve(
        Router::new()
            .route("/", get(|| async { "a" }))
            .layer(layer.clone()),
    )
    .await;
    let b = serve(Router::new().route("/", get(|| async { "b" })).layer(layer)).await;
    let client = reqwest::Client::new();
    let mut admitted = 0;
    for i in 0..10 {
        let url = if i % 2 == 0 { &a } else { &b };
        if client.get(url).send().await.unwrap().status() == StatusCode::OK {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 4, "two apps, one limit");
}

#[tokio::test]
async fn without_a_peer_address_an_ip_limit_cannot_key_the_request() {
    // Served without connect info: the layer finds no client address.
    let app = Router::new()
        .route("/", get(|| async { "x" }))
        .layer(RateLimitLayer::from_toml(PER_IP).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let r = reqwest::get(format!("http://{addr}/")).await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
}

#[tokio::test]
async fn a_custom_peer_function_replaces_the_socket_address() {
    let layer = RateLimitLayer::from_toml(PER_IP)
        .unwrap()
        .with_peer(|headers, _| headers.get("x-test-ip")?.to_str().ok()?.parse().ok());
    let app = Router::new().route("/", get(|| async { "x" })).layer(layer);
    let url = serve(app).await;
    let client = reqwest::Client::new();
    let status = |ip: &'static str| {
        let req = client.get(&url).header("x-test-ip", ip);
        async move { req.send().await.unwrap().status() }
    };
    for _ in 0..4 {
        assert_eq!(status("192.0.2.1").await, StatusCode::OK);
    }
    assert_eq!(status("192.0.2.1").await, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(status("192.0.2.2").await, StatusCode::OK, "another client");
}

/// A bare tower service, no axum: the layer wraps it all the same.
#[derive(Clone)]
struct Hello;

impl Service<Request<String>> for Hello {
    type Response = Response<String>;
    type Error = Infallible;
    type Future = Ready<Result<Response<String>, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: Request<String>) -> Self::Future {
        std::future::ready(Ok(Response::new("hello".to_owned())))
    }
}

#[tokio::test]
async fn wraps_a_bare_tower_service() {
    let mut svc = RateLimitLayer::from_toml(PER_IP).unwrap().layer(Hello);
    let request = || {
        let mut r = Request::new(String::new());
        r.extensions_mut()
            .insert(SocketAddr::from(([192, 0, 2, 9], 1234)));
        r
    };
    for _ in 0..4 {
        let r = svc.call(request()).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r.headers().contains_key("ratelimit"));
    }
    assert_eq!(
        svc.call(request()).await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

const DELAYED: &str = r#"
    [[limits]]
    name = "smooth"
    key = "global"
    rate = "2/s"
    burst = 1
    on_limit = "delay"
    max_delay = "5s"
    max_queue = 2
"#;

#[tokio::test]
async fn on_limit_delay_holds_requests_and_bounds_the_queue() {
    let mut svc = RateLimitLayer::from_toml(DELAYED).unwrap().layer(Hello);
    // On the memory store, `call` decides at once: these four are decided
    // in this order, before any of them is awaited.
    let start = tokio::time::Instant::now();
    let first = svc.call(Request::new(String::new()));
    let second = svc.call(Request::new(String::new()));
    let third = svc.call(Request::new(String::new()));
    let fourth = svc.call(Request::new(String::new()));
    let (first, second, third, fourth) = tokio::join!(first, second, third, fourth);
    assert_eq!(first.unwrap().status(), StatusCode::OK);
    assert_eq!(second.unwrap().status(), StatusCode::OK);
    assert_eq!(third.unwrap().status(), StatusCode::OK, "held, then passed");
    // Two were waiting (the queue's bound): the fourth is refused, though
    // it would have fit within max_delay.
    let fourth = fourth.unwrap();
    assert_eq!(fourth.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(fourth.headers().contains_key("retry-after"));
    // The third waited its turn at 2/s behind two others (a lower bound:
    // a sleep never ends early).
    assert!(start.elapsed() >= std::time::Duration::from_millis(900));
}

#[tokio::test]
async fn a_layer_built_in_code_limits_like_one_from_toml() {
    use sluice_http::layer_builder::LimitBuilder;
    let layer = RateLimitLayer::builder()
        .limit(LimitBuilder::per_ip("per-ip", "1/min").burst(2))
        .limit(LimitBuilder::per_header("export", "X-Api-Key", "1/min").path_prefix("/export"))
        .build()
        .unwrap()
        .with_verdict();
    let app = Router::new()
        .route("/", get(remaining))
        .route("/export", get(|| async { "exported" }))
        .layer(layer);
    let url = serve(app).await;
    let client = reqwest::Client::new();
    for left in [1, 0] {
        let r = client.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.text().await.unwrap(), left.to_string());
    }
    let r = client.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert!(r.headers().contains_key("retry-after"));
    // The export limit needs its key.
    let r = client.get(format!("{url}export")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

#[test]
fn a_bad_limit_in_code_is_a_config_error() {
    use sluice_http::layer_builder::LimitBuilder;
    let e = RateLimitLayer::builder()
        .limit(LimitBuilder::per_ip("per-ip", "ten per second"))
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("limit `per-ip`: rate"), "{e}");
}

/// Sends one HTTP/1.1 request in absolute form, with no Host field (which
/// hyper accepts), and returns its status code.
async fn absolute_form_status(base: &str) -> u16 {
    raw_status(base, "GET http://api.example.com/ HTTP/1.1\r\n").await
}

/// Sends `head` (its request line and fields), then `Connection: close`,
/// and returns the status code.
async fn raw_status(base: &str, head: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://").trim_end_matches('/');
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = String::new();
    tcp.read_to_string(&mut reply).await.unwrap();
    reply
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP reply: {reply:?}"))
}

const API_HOST: &str = r#"
    [[limits]]
    name = "api-host"
    key = "global"
    rate = "1/min"
    burst = 2
    match = { host = "api.example.com" }
"#;

async fn serve_ok(layer: RateLimitLayer) -> String {
    serve(
        Router::new()
            .route("/", get(|| async { "ok" }))
            .layer(layer),
    )
    .await
}

/// A host-matched limit applies to a request whose host is only in its
/// absolute-form URI: without the Host field, it must not slip past.
#[tokio::test]
async fn a_host_limit_applies_to_an_absolute_form_request_without_host() {
    let base = serve_ok(RateLimitLayer::from_toml(API_HOST).unwrap()).await;
    let statuses = [
        absolute_form_status(&base).await,
        absolute_form_status(&base).await,
        absolute_form_status(&base).await,
    ];
    assert_eq!(statuses, [200, 200, 429]);
}

/// Nor may a request slip past a host limit by naming no host, two hosts,
/// or another host in its target than in `Host`: each is a 400. Without a
/// host limit, a request without `Host` is the app's business.
#[tokio::test]
async fn a_request_that_names_its_host_ambiguously_is_refused() {
    let base = serve_ok(RateLimitLayer::from_toml(API_HOST).unwrap()).await;
    for head in [
        "GET / HTTP/1.1\r\n",
        "GET / HTTP/1.1\r\nHost: other.example.com\r\nHost: api.example.com\r\n",
        "GET http://api.example.com/ HTTP/1.1\r\nHost: other.example.com\r\n",
    ] {
        assert_eq!(raw_status(&base, head).await, 400, "{head:?}");
    }
    let base = serve_ok(RateLimitLayer::from_toml(PER_IP).unwrap()).await;
    assert_eq!(raw_status(&base, "GET / HTTP/1.1\r\n").await, 200);
}
