//! In proxy mode, a limit settles from a field the upstream sends: a
//! header (`from = "header:X-Tokens-Used"`) or a trailer
//! (`from = "trailer:X-Tokens-Used"`, after a chunked HTTP/1.1 body). A
//! whole number settles exactly, above the estimate (debited) or below it
//! (refunded); a value that is not a whole number, a negative one, or none
//! at all settles at the estimate.

use std::convert::Infallible;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue};
use bytes::Bytes;
use http_body_util::StreamBody;
use hyper::body::Frame;

use crate::common::{Reply, Sluice, client, metric, send};

/// The upstream: answers every request with a short body, and sends back
/// as `X-Tokens-Used` what the request's `X-Report-Header` says, in the
/// header, and its `X-Report-Trailer`, as a trailer after the body.
async fn start_upstream() -> String {
    async fn answer(headers: HeaderMap) -> axum::response::Response {
        let mut frames: Vec<Result<Frame<Bytes>, Infallible>> =
            vec![Ok(Frame::data(Bytes::from_static(b"done\n")))];
        if let Some(v) = headers.get("x-report-trailer") {
            let mut trailers = HeaderMap::new();
            trailers.insert("x-tokens-used", v.clone());
            frames.push(Ok(Frame::trailers(trailers)));
        }
        let mut response =
            axum::response::Response::new(Body::new(StreamBody::new(tokio_stream::iter(frames))));
        if let Some(v) = headers.get("x-report-header") {
            response.headers_mut().insert("x-tokens-used", v.clone());
        }
        if headers.contains_key("x-report-trailer") {
            let declared = HeaderValue::from_static("x-tokens-used");
            response.headers_mut().insert("trailer", declared);
        }
        response
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = axum::Router::new().fallback(answer);
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn config(upstream: &str) -> String {
    let limit = |name: &str, prefix: &str, from: &str| {
        format!(
            "[[limits]]\nname = \"{name}\"\nkey = \"header:X-Api-Key\"\nrate = \"1000/30d\"\nburst = 1000\ncost = 10\nmatch = {{ path_prefix = \"{prefix}\" }}\nsettle = {{ from = \"{from}\" }}\n\n"
        )
    };
    format!(
        "upstream = \"{upstream}\"\n\n{}{}",
        limit("by_header", "/h", "header:X-Tokens-Used"),
        limit("by_trailer", "/t", "trailer:X-Tokens-Used")
    )
}

async fn settlements(sluice: &Sluice, limit: &str) -> f64 {
    let mut n = 0.0;
    for result in ["exact", "refunded", "debited", "excess", "failed"] {
        let labels = [("limit", limit), ("result", result)];
        n += metric(sluice, "sluice_settlements_total", &labels)
            .await
            .unwrap_or(0.0);
    }
    n
}

/// One request through the proxy, with `report` as the field `name` the
/// upstream sends back; returns once its settlement is counted.
async fn request(sluice: &Sluice, path: &str, report: Option<(&str, &str)>) -> Reply {
    let limit = if path == "/h" {
        "by_header"
    } else {
        "by_trailer"
    };
    let before = settlements(sluice, limit).await;
    let mut builder = client().get(sluice.url(path)).header("x-api-key", "k");
    if let Some((name, value)) = report {
        builder = builder.header(name, value);
    }
    let reply = send(builder).await;
    assert_eq!(reply.status, 200, "{path} {report:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while settlements(sluice, limit).await < before + 1.0 {
        assert!(
            Instant::now() < deadline,
            "{path} {report:?}: never settled"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    reply
}

/// What the next admission says is left (`r` of the `RateLimit` field),
/// its own estimate of 10 taken.
async fn remaining(sluice: &Sluice, path: &str) -> u64 {
    let reply = request(sluice, path, None).await;
    let field = reply.header("ratelimit").to_owned();
    let r = field
        .split(';')
        .find_map(|p| p.strip_prefix("r="))
        .unwrap_or_else(|| panic!("no r in {field}"));
    r.parse().unwrap()
}

async fn moved(sluice: &Sluice, limit: &str, direction: &str) -> f64 {
    let labels = [("limit", limit), ("direction", direction)];
    metric(sluice, "sluice_settled_cost_total", &labels)
        .await
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_header_settles_the_cost_and_a_bad_one_settles_at_the_estimate() {
    let upstream = start_upstream().await;
    let sluice = Sluice::start_with("proxy-settle-header", &config(&upstream));
    let field = "x-report-header";
    request(&sluice, "/h", Some((field, "100"))).await; // 90 more
    request(&sluice, "/h", Some((field, "abc"))).await; // the estimate
    request(&sluice, "/h", Some((field, "-5"))).await; // the estimate
    request(&sluice, "/h", Some((field, "4"))).await; // 6 back
    // 100 + 10 + 10 + 4 used; the next reserves its 10.
    assert_eq!(remaining(&sluice, "/h").await, 1000 - 124 - 10);
    assert_eq!(moved(&sluice, "by_header", "debited").await, 90.0);
    assert_eq!(moved(&sluice, "by_header", "refunded").await, 6.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_trailer_settles_the_cost() {
    let upstream = start_upstream().await;
    let sluice = Sluice::start_with("proxy-settle-trailer", &config(&upstream));
    let field = "x-report-trailer";
    request(&sluice, "/t", Some((field, "250"))).await; // 240 more
    request(&sluice, "/t", Some((field, "x1"))).await; // the estimate
    request(&sluice, "/t", Some((field, "0"))).await; // 10 back
    assert_eq!(remaining(&sluice, "/t").await, 1000 - 260 - 10);
    assert_eq!(moved(&sluice, "by_trailer", "debited").await, 240.0);
    assert_eq!(moved(&sluice, "by_trailer", "refunded").await, 10.0);
}
