//! A tower layer of adaptive overload protection: an optional concurrency
//! limit on the inner service (the upstream) that follows its latency, and
//! sheds the lowest priority class (plan) first. See `docs/overload.md`.
//!
//! In `sluice serve`'s proxy mode it sits inside the
//! [`RateLimitLayer`](crate::RateLimitLayer), so only requests the rate
//! limits admitted enter the gate. Used directly:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # fn demo(engine: Arc<sluice_policy::Engine>, app: axum::Router) -> axum::Router {
//! use sluice_http::overload_layer::OverloadLayer;
//! app.layer(OverloadLayer::new(engine.clone()))   // `[overload]` of the engine's policy
//!    .layer(sluice_http::RateLimitLayer::new(engine))
//! # }
//! ```
//!
//! An admitted request keeps its place until its response body ends (a
//! streamed answer counts in flight while it streams), but its latency, the
//! gate's signal, is measured to the response head: a long stream is the
//! answer's length, not the upstream's queueing. How it ends:
//! 429 and 503 from the inner service are drops (the upstream's own
//! overload), 504 a timeout, another 5xx or an error an upstream error (no
//! sample), a body dropped before its end a cancellation (no sample), and
//! anything else a success.
//!
//! A shed request gets a 503 with `Retry-After` (whole seconds, rounded up,
//! at least 1) and a problem+json body of type [`OVERLOADED`], or, when its
//! plan says `on_overload = "wait"`, waits up to its `max_wait` (at most
//! 1 s, with at most `max_waiting` waiting) for a request to leave, then
//! tries the gate once more.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use sluice_core::adaptive::{Outcome, Shed};
use sluice_policy::{Engine, OverloadSettings};
use tower_layer::Layer;
use tower_service::Service;

use crate::overload::{Admission, Admit, Overload};
use crate::problem::{OVERLOADED, Problem};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A tower layer of adaptive overload protection (see the
/// [module](self)).
#[derive(Debug, Clone)]
pub struct OverloadLayer {
    overload: Arc<Overload>,
}

impl OverloadLayer {
    /// A layer following the `[overload]` settings of `engine`'s policy in
    /// force (a reload may switch it on or off, or change it); off while
    /// the policy has none. `engine` also finds each client's plan.
    pub fn new(engine: Arc<Engine>) -> Self {
        Self::from_shared(Arc::new(Overload::new(engine)))
    }

    /// A layer with fixed settings (built in code, or compiled from a
    /// config with [`Policy::overload`](sluice_policy::Policy::overload)),
    /// finding plans with `engine`.
    pub fn with_settings(engine: Arc<Engine>, settings: OverloadSettings) -> Self {
        Self::from_shared(Arc::new(Overload::with_settings(engine, settings)))
    }

    /// A layer over protection state shared with others (the metrics and
    /// the status page read it too).
    pub fn from_shared(overload: Arc<Overload>) -> Self {
        Self { overload }
    }

    /// The shared state, for [`Metrics::watch_overload`](crate::metrics::Metrics::watch_overload).
    pub fn shared(&self) -> &Arc<Overload> {
        &self.overload
    }
}

impl<S> Layer<S> for OverloadLayer {
    type Service = OverloadService<S>;

    fn layer(&self, inner: S) -> OverloadService<S> {
        OverloadService {
            inner,
            overload: self.overload.clone(),
        }
    }
}

/// The service [`OverloadLayer`] wraps around another.
#[derive(Debug, Clone)]
pub struct OverloadService<S> {
    inner: S,
    overload: Arc<Overload>,
}

/// The answer to a shed request: 503, `Retry-After`, problem+json.
pub fn shed_response(shed: &Shed, class: &str) -> Response<Body> {
    let secs = shed.retry_after.div_ceil(1_000_000_000).max(1);
    let mut problem = Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        format!(
            "The upstream service is overloaded: requests of class `{class}` are shed for now (limit {}, in flight {}). Retry in {secs} s.",
            shed.limit, shed.in_flight
        ),
    );
    problem.kind = OVERLOADED.into();
    problem.title = "Overloaded".into();
    problem.retry_after = Some(secs);
    let mut response = problem.into_response();
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, http::HeaderValue::from(secs));
    response
}

/// How a response with this status ends for the gate.
pub fn outcome_of(status: StatusCode) -> Outcome {
    match status {
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => Outcome::Dropped,
        StatusCode::GATEWAY_TIMEOUT => Outcome::Timeout,
        s if s.is_server_error() => Outcome::UpstreamError,
        _ => Outcome::Success,
    }
}

type BoxResponse<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

pin_project! {
    /// The response future of an [`OverloadService`].
    pub struct OverloadFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        /// The inner service's future, with the admission if any.
        Inner {
            #[pin]
            inner: F,
            admission: Option<Admission>,
        },
        /// A shed request's answer.
        Shed { response: Option<Response<Body>> },
        /// A request waiting for room.
        Waiting { future: BoxResponse<E> },
    }
}

impl<F, E, B> Future for OverloadFuture<F, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner { inner, admission } => {
                let result = std::task::ready!(inner.poll(cx));
                Poll::Ready(with_admission(result, admission.take()))
            }
            KindProj::Shed { response } => Poll::Ready(Ok(crate::answered::take(response))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

/// The inner service's answer, its body holding `admission` until it ends.
fn with_admission<B, E>(
    result: Result<Response<B>, E>,
    admission: Option<Admission>,
) -> Result<Response<Body>, E>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let Some(mut admission) = admission else {
        return result.map(|r| r.map(Body::new));
    };
    match result {
        Err(e) => {
            admission.finish(Outcome::UpstreamError);
            Err(e)
        }
        Ok(response) => {
            admission.head(outcome_of(response.status()));
            if http_body::Body::is_end_stream(response.body()) {
                admission.finish(Outcome::Success);
                return Ok(response.map(Body::new));
            }
            Ok(response.map(|b| Body::new(GateBody::new(b, admission))))
        }
    }
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for OverloadService<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = OverloadFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let admit = self.overload.try_admit(
            req.method(),
            req.uri().path(),
            req.headers(),
            req.extensions(),
        );
        let kind = match admit {
            Admit::Off => Kind::Inner {
                inner: self.inner.call(req),
                admission: None,
            },
            Admit::In(admission) => Kind::Inner {
                inner: self.inner.call(req),
                admission: Some(admission),
            },
            Admit::Shed {
                shed,
                class,
                max_wait: Some(wait),
            } => {
                // The service that was made ready goes with the request.
                let clone = self.inner.clone();
                let inner = std::mem::replace(&mut self.inner, clone);
                let overload = self.overload.clone();
                Kind::Waiting {
                    future: Box::pin(async move {
                        match overload.wait_and_retry(shed.class, wait).await {
                            Ok(admission) => {
                                let mut inner = inner;
                                let result = inner.call(req).await;
                                with_admission(result, Some(admission))
                            }
                            Err(shed) => {
                                overload.count_shed(shed.class);
                                Ok(shed_response(&shed, &class))
                            }
                        }
                    }),
                }
            }
            Admit::Shed { shed, class, .. } => {
                self.overload.count_shed(shed.class);
                Kind::Shed {
                    response: Some(shed_response(&shed, &class)),
                }
            }
        };
        OverloadFuture { kind }
    }
}

pin_project! {
    /// A response body holding its request's place in the gate until it
    /// ends (success, or the head's outcome), fails (upstream error) or is
    /// dropped (cancelled).
    pub struct GateBody<B> {
        #[pin]
        body: B,
        admission: Option<Admission>,
    }
}

impl<B> GateBody<B> {
    /// `body`, holding `admission`.
    pub fn new(body: B, admission: Admission) -> Self {
        Self {
            body,
            admission: Some(admission),
        }
    }
}

impl<B: http_body::Body> http_body::Body for GateBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.body.as_mut().poll_frame(cx));
        let outcome = match &frame {
            None => Some(Outcome::Success),
            Some(Err(_)) => Some(Outcome::UpstreamError),
            Some(Ok(_)) if this.body.is_end_stream() => Some(Outcome::Success),
            Some(Ok(_)) => None,
        };
        if let Some(outcome) = outcome
            && let Some(a) = this.admission.take()
        {
            a.finish(outcome);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use http_body_util::BodyExt;
    use sluice_policy::Policy;

    use super::*;

    /// An inner service answering 200 with a one-chunk body, or the status
    /// of the `x-status` field.
    #[derive(Clone)]
    struct Echo;

    impl Service<Request<Body>> for Echo {
        type Response = Response<Body>;
        type Error = Infallible;
        type Future = std::future::Ready<Result<Response<Body>, Infallible>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: Request<Body>) -> Self::Future {
            let status = req
                .headers()
                .get("x-status")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or(200);
            let mut r = Response::new(Body::from("hello"));
            *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            std::future::ready(Ok(r))
        }
    }

    fn layer(limit: u32) -> OverloadLayer {
        let text = format!(
            "no_limits = true\n[overload]\ninitial_limit = {limit}\nmin_limit = {limit}\nmax_limit = {limit}\n"
        );
        let policy = Policy::from_toml("t.toml", &text).unwrap();
        OverloadLayer::new(Arc::new(Engine::in_memory(policy, 1_000)))
    }

    fn get() -> Request<Body> {
        Request::new(Body::empty())
    }

    #[tokio::test]
    async fn the_place_is_held_until_the_body_ends_and_a_shed_request_gets_503() {
        let layer = layer(1);
        let mut svc = layer.layer(Echo);
        let first = svc.call(get()).await.unwrap();
        assert_eq!(layer.shared().snapshot().unwrap().in_flight, 1);
        let shed = svc.call(get()).await.unwrap();
        assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(shed.headers()[http::header::RETRY_AFTER], "1");
        assert_eq!(
            shed.headers()[http::header::CONTENT_TYPE],
            "application/problem+json"
        );
        let body = shed.into_body().collect().await.unwrap().to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["type"], OVERLOADED);
        assert_eq!(problem["retry_after"], 1);
        // Read to its end, the first body gives its place back.
        first.into_body().collect().await.unwrap();
        let s = layer.shared().snapshot().unwrap();
        assert_eq!(
            (s.in_flight, s.classes[0].admitted, s.classes[0].shed),
            (0, 1, 1)
        );
        // Dropped early, too (as cancelled).
        let third = svc.call(get()).await.unwrap();
        assert_eq!(third.status(), StatusCode::OK);
        drop(third);
        assert_eq!(layer.shared().snapshot().unwrap().in_flight, 0);
    }

    #[tokio::test]
    async fn without_overload_settings_nothing_is_gated() {
        let policy = Policy::from_toml("t.toml", "no_limits = true").unwrap();
        let layer = OverloadLayer::new(Arc::new(Engine::in_memory(policy, 1_000)));
        let mut svc = layer.layer(Echo);
        let responses = [
            svc.call(get()).await.unwrap(),
            svc.call(get()).await.unwrap(),
        ];
        assert!(responses.iter().all(|r| r.status() == StatusCode::OK));
        assert!(layer.shared().snapshot().is_none());
    }

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(outcome_of(StatusCode::OK), Outcome::Success);
        assert_eq!(outcome_of(StatusCode::NOT_FOUND), Outcome::Success);
        assert_eq!(outcome_of(StatusCode::TOO_MANY_REQUESTS), Outcome::Dropped);
        assert_eq!(
            outcome_of(StatusCode::SERVICE_UNAVAILABLE),
            Outcome::Dropped
        );
        assert_eq!(outcome_of(StatusCode::GATEWAY_TIMEOUT), Outcome::Timeout);
        assert_eq!(outcome_of(StatusCode::BAD_GATEWAY), Outcome::UpstreamError);
    }

    #[test]
    fn retry_after_is_whole_seconds_rounded_up() {
        let shed = |ns| Shed {
            class: 0,
            retry_after: ns,
            limit: 4,
            in_flight: 4,
        };
        let secs =
            |ns| shed_response(&shed(ns), "free").headers()[http::header::RETRY_AFTER].clone();
        assert_eq!(secs(0), "1");
        assert_eq!(secs(100_000_000), "1");
        assert_eq!(secs(1_000_000_001), "2");
    }
}
