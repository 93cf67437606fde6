//! What the data plane does to a request before any limit sees it, as one
//! service around the limits: the edge's checks, then the body's fields
//! where a rule reads them.
//!
//! A plain service, not two `axum::middleware::map_request` layers: those
//! box a future and clone the services inside them for every request; this
//! boxes only where a body is read.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::response::Response;
use http::Request;
use pin_project_lite::pin_project;
use sluice_policy::host::HostError;
use sluice_policy::{DecideError, Engine};

use crate::proxy::strip_hop_by_hop;
use crate::request_fields::{has_fields_to_read, read_request_fields};
use crate::verdict_json::decide_error_response;

/// The edge around `inner` (the limits and what they guard).
#[derive(Clone)]
pub struct Edge<S> {
    inner: S,
    engine: Arc<Engine>,
    proxied: bool,
}

impl<S> Edge<S> {
    /// `inner` behind the edge's checks, with the body's fields read where
    /// `engine`'s policy reads them; `proxied` when `inner` forwards to an
    /// upstream.
    pub fn new(inner: S, engine: Arc<Engine>, proxied: bool) -> Self {
        Self {
            inner,
            engine,
            proxied,
        }
    }
}

/// What every request meets at the edge, so that what is limited is what
/// is served:
/// - behind the proxy, hop-by-hop fields go, those the `Connection` field
///   names included (`Connection: X-Api-Key`), as the proxy would drop
///   them: a limit never counts a key the upstream does not get;
/// - an HTTP/1.1 request without a host (no `Host`, no absolute-form
///   target), or whose `Host` is ambiguous or malformed
///   ([`host`](sluice_policy::host)), is refused with 400, as RFC 9112
///   §3.2 says, whether or not a limit reads the host (the layer checks it
///   only then).
fn at_the_edge(req: &mut Request<Body>, proxied: bool) -> Result<(), HostError> {
    if proxied {
        strip_hop_by_hop(req.headers_mut());
    }
    sluice_policy::host::check(req.headers())?;
    if req.version() == http::Version::HTTP_11
        && req.uri().authority().is_none()
        && !req.headers().contains_key(http::header::HOST)
    {
        return Err(HostError::Missing);
    }
    Ok(())
}

type Boxed = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

impl<S> tower_service::Service<Request<Body>> for Edge<S>
where
    S: tower_service::Service<Request<Body>, Response = Response, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        if let Err(e) = at_the_edge(&mut req, self.proxied) {
            return EdgeFuture::in_state(State::Answered {
                response: Some(decide_error_response(&DecideError::Host(e))),
            });
        }
        if !has_fields_to_read(&self.engine, &req) {
            return EdgeFuture::in_state(State::Inner {
                inner: self.inner.call(req),
            });
        }
        // The service made ready is the one that takes the request, once
        // its body has been read.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let engine = self.engine.clone();
        EdgeFuture::in_state(State::Reading {
            reading: Box::pin(async move {
                let req = read_request_fields(engine, req).await;
                inner.call(req).await
            }),
        })
    }
}

pin_project! {
    /// [`Edge`]'s answer: a refusal at the edge, or the inner service's.
    pub struct EdgeFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        // Refused at the edge (the refusal, until it is returned).
        Answered { response: Option<Response> },
        // Passed on as it came.
        Inner { #[pin] inner: F },
        // Passed on once its body's fields were read.
        Reading { reading: Boxed },
    }
}

impl<F> EdgeFuture<F> {
    fn in_state(state: State<F>) -> Self {
        Self { state }
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Answered { response } => Poll::Ready(Ok(crate::answered::take(response))),
            StateProj::Inner { inner } => inner.poll(cx),
            StateProj::Reading { reading } => reading.as_mut().poll(cx),
        }
    }
}
