//! The tower middleware: Sluice in front of any tower `Service`, such as an
//! axum `Router` or a bare hyper service.
//!
//! ```no_run
//! use std::net::SocketAddr;
//! use axum::{Router, routing::get};
//! use sluice_http::RateLimitLayer;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let app = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::from_file("sluice.toml")?);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
//! axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
//! # Ok(()) }
//! ```
//!
//! Every clone of the layer and of the services it makes shares one
//! [`Engine`] behind an `Arc`, so all connections and all routes count
//! against the same limits. A refused request gets the same 429 (or 401)
//! problem response and header fields as `sluice serve`, and never reaches
//! the inner service. An admitted one reaches it, and its response gets the
//! rate-limit fields. Handlers that want the decision itself (to show the
//! quota left, say) ask for it with [`RateLimitLayer::with_verdict`].
//!
//! The client address is the socket peer found in the request extensions
//! (`axum::extract::ConnectInfo<SocketAddr>`, or a plain `SocketAddr`); the
//! policy then applies its trusted-proxy rules. Replace it with
//! [`RateLimitLayer::with_peer`].
//!
//! Limits whose cost is settled after the response (a `settle` rule) are
//! settled when the response body ends (or is dropped): the handler reports
//! the actual cost with a [`ActualCost`](crate::settling_body::ActualCost)
//! response extension, or the rule reads the status, a response header,
//! the trailers or the bytes sent (see
//! [`settling_body`](crate::settling_body)).

use std::borrow::Cow;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::ConnectInfo;
use bytes::Bytes;
use http::{Extensions, HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use sluice_policy::host::HostError;
use sluice_policy::path::canonical;
use sluice_policy::{
    ConfigError, DecideError, Deployment, Engine, Policy, RequestInfo, Source, Verdict,
};
use tower_layer::Layer;
use tower_service::Service;

use crate::headers::Fields;
use crate::metrics::Metrics;
use crate::verdict_json::{decide_error_response, refusal_response};

mod waiting;
use waiting::forward;

/// Finds the address a request came from.
pub type PeerFn = Arc<dyn Fn(&HeaderMap, &Extensions) -> Option<IpAddr> + Send + Sync>;

/// The socket peer from the request extensions.
pub fn socket_peer(_: &HeaderMap, extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip())
        .or_else(|| extensions.get::<SocketAddr>().map(SocketAddr::ip))
}

/// A tower layer that rate limits with a Sluice [`Engine`].
#[derive(Clone)]
pub struct RateLimitLayer {
    shared: Arc<Shared>,
}

/// What a layer and every service it makes share, behind one `Arc` (axum
/// clones a route's service for every request). A layer being configured
/// is its only holder, so `Arc::make_mut` changes it in place.
#[derive(Clone)]
struct Shared {
    engine: Arc<Engine>,
    peer: PeerFn,
    metrics: Option<Arc<Metrics>>,
    /// Whether an admitted request carries its verdict to the handler.
    verdict: bool,
}

impl std::fmt::Debug for RateLimitLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitLayer")
            .field("engine", &self.shared.engine)
            .finish_non_exhaustive()
    }
}

impl RateLimitLayer {
    /// A layer over an engine (which may be shared with other layers or a
    /// `sluice serve` data plane in the same process).
    pub fn new(engine: Arc<Engine>) -> Self {
        Self {
            shared: Arc::new(Shared {
                engine,
                peer: Arc::new(socket_peer),
                metrics: None,
                verdict: false,
            }),
        }
    }

    /// Puts each admitted request's [`Verdict`] in its extensions, for the
    /// handler: `req.extensions().get::<Verdict>()`, or axum's
    /// `Extension<Verdict>` (which clones it).
    ///
    /// Off by default: it costs an allocation and a map insert on every
    /// request, which services whose handlers never read it should not
    /// pay. The response's rate-limit fields do not depend on it.
    pub fn with_verdict(mut self) -> Self {
        Arc::make_mut(&mut self.shared).verdict = true;
        self
    }

    /// Records every decision in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        Arc::make_mut(&mut self.shared).metrics = Some(metrics);
        self
    }

    /// A builder for a layer configured in code (see
    /// [`layer_builder`](crate::layer_builder)).
    pub fn builder() -> crate::layer_builder::LayerBuilder {
        crate::layer_builder::LayerBuilder::default()
    }

    /// A layer with its own engine (on a memory store of the config's
    /// `[store] max_keys`), from a Sluice config file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ConfigError> {
        Self::from_source(&Source::read(path.as_ref())?)
    }

    /// A layer with its own engine, from config text (TOML).
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Self::from_source(&Source {
            file: "<inline config>".into(),
            text: text.to_owned(),
        })
    }

    fn from_source(source: &Source) -> Result<Self, ConfigError> {
        let config = source.parse()?;
        let max_keys = Deployment::compile(source, &config)?.store.max_keys;
        let policy = Policy::compile(source, &config)?;
        Ok(Self::new(Arc::new(Engine::in_memory(policy, max_keys))))
    }

    /// Finds the client address with `peer` instead of the socket peer.
    pub fn with_peer(
        mut self,
        peer: impl Fn(&HeaderMap, &Extensions) -> Option<IpAddr> + Send + Sync + 'static,
    ) -> Self {
        Arc::make_mut(&mut self.shared).peer = Arc::new(peer);
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.shared.engine
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// The service [`RateLimitLayer`] wraps around another.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed response future: the paths that wait (for the shared store, or
/// for a delay) before calling the inner service.
type BoxResponse<E> = Pin<Box<dyn Future<Output = Result<Response<Body>, E>> + Send>>;

pin_project! {
    /// The response future of a [`RateLimit`] service.
    ///
    /// On the memory store, a request that need not wait is decided within
    /// `call` and the inner service is called at once, so the future is the
    /// inner one plus the rate-limit fields: no allocation and no clone of
    /// the inner service. Requests that wait (for Redis, or a delay) take a
    /// boxed future.
    pub struct ResponseFuture<F, E> {
        #[pin]
        kind: Kind<F, E>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<F, E> {
        /// The inner service's future; its response gets the verdict's fields.
        Forward {
            #[pin]
            inner: F,
            fields: Option<Fields>,
        },
        /// A refusal, answered without the inner service.
        Refused { response: Option<Response<Body>> },
        /// A request that waits before the inner service is called.
        Waiting { future: BoxResponse<E> },
    }
}

impl<F, E> ResponseFuture<F, E> {
    fn refused(response: Response<Body>) -> Self {
        Self {
            kind: Kind::Refused {
                response: Some(response),
            },
        }
    }

    fn waiting(future: BoxResponse<E>) -> Self {
        Self {
            kind: Kind::Waiting { future },
        }
    }
}

impl<F, E, ResBody> Future for ResponseFuture<F, E>
where
    F: Future<Output = Result<Response<ResBody>, E>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Output = Result<Response<Body>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Forward { inner, fields } => {
                let mut response = std::task::ready!(inner.poll(cx))?.map(Body::new);
                if let Some(fields) = fields.take() {
                    fields.apply(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            KindProj::Refused { response } => Poll::Ready(Ok(crate::answered::take(response))),
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<ReqBody>) -> Self::Future {
        let shared = &*self.shared;
        let peer = (shared.peer)(req.headers(), req.extensions());
        if let Err(e) = target_host(&mut req).and_then(|()| host_if_read(&req, &shared.engine)) {
            let decided = Err(DecideError::Host(e));
            if let Some(m) = &shared.metrics {
                m.record_result(&decided);
            }
            return ResponseFuture::refused(refused(&decided));
        }
        // The inner service (an upstream, a router) sees the canonical path
        // that was limited. A path with none is refused by the engine.
        if let Ok(Cow::Owned(path)) = canonical(req.uri().path()) {
            set_path(req.uri_mut(), &path);
        }
        // A store in this process decides without waiting: no future. (A
        // policy that settles costs after the response takes the path that
        // keeps the request's reservation: `decide_now` answers `None`.)
        let decided = shared
            .engine
            .decide_now(&request_info(&req, peer, &shared.engine));
        if let Some(d) = &decided {
            if let Some(m) = &shared.metrics {
                m.record_result(d);
            }
            // Read where it was returned: the verdict is moved only to the
            // handler.
            let (fields, delay) = match d {
                Ok(v) if v.allowed => (Fields::of(v), v.delay()),
                _ => return ResponseFuture::refused(refused(d)),
            };
            if shared.verdict
                && let Some(Ok(v)) = decided
            {
                req.extensions_mut().insert(v);
            }
            if delay > 0 {
                let inner = self.take_inner();
                return ResponseFuture::waiting(Box::pin(forward(inner, req, fields, delay)));
            }
            // The service that was polled ready is called now.
            return ResponseFuture {
                kind: Kind::Forward {
                    inner: self.inner.call(req),
                    fields,
                },
            };
        }
        let inner = self.take_inner();
        let shared = self.shared.clone();
        ResponseFuture::waiting(Box::pin(waiting::decide_then_forward(
            shared, inner, req, peer,
        )))
    }
}

impl<S: Clone> RateLimit<S> {
    /// The service that was polled ready, for a call made later; a clone
    /// takes its place.
    fn take_inner(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// HTTP/2 carries the host in the URI's authority, and so does an HTTP/1.1
/// request in absolute form: `match.host` reads it from the `Host` field,
/// so it is put there when the field is absent. A `Host` that names
/// another host than the authority is refused: one of them would be
/// limited and the other served. (The usual origin-form request has no
/// authority, and no lookup.)
fn target_host<B>(req: &mut Request<B>) -> Result<(), HostError> {
    let Some(authority) = req.uri().authority() else {
        return Ok(());
    };
    match req.headers().get(http::header::HOST) {
        None => {
            if let Ok(host) = http::HeaderValue::from_str(authority.as_str()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
            Ok(())
        }
        Some(host)
            if host
                .as_bytes()
                .eq_ignore_ascii_case(authority.as_str().as_bytes()) =>
        {
            Ok(())
        }
        Some(_) => Err(HostError::Conflict),
    }
}

/// An HTTP/1.1 request must name its host (RFC 9112 §3.2). The layer
/// refuses one that names none when a limit matches on the host, which it
/// would slip past; the data plane refuses every such request
/// ([`data_plane`](crate::data_plane)). (A request built in a test without
/// `Host` passes a policy that reads no host.)
fn host_if_read<B>(req: &Request<B>, engine: &Engine) -> Result<(), HostError> {
    if req.version() == http::Version::HTTP_11
        && engine.reads_host()
        && !req.headers().contains_key(http::header::HOST)
    {
        return Err(HostError::Missing);
    }
    Ok(())
}

/// Replaces a URI's path, keeping its query (and scheme and authority).
fn set_path(uri: &mut http::Uri, path: &str) {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = pq.parse().ok();
    if let Ok(new) = http::Uri::from_parts(parts) {
        *uri = new;
    }
}

fn request_info<'r, B>(
    req: &'r Request<B>,
    peer: Option<IpAddr>,
    engine: &Engine,
) -> RequestInfo<'r> {
    RequestInfo {
        method: req.method(),
        path: req.uri().path(),
        headers: req.headers(),
        peer,
        cost: None,
        // Read before the layer, where a rule asks (`request_fields`); a
        // policy that reads no body is not given one to look up.
        body: if engine.reads_request_body() {
            req.extensions().get()
        } else {
            None
        },
    }
}

/// The response to a request that may not pass.
fn refused(decided: &Result<Verdict, DecideError>) -> Response<Body> {
    match decided {
        Err(e) => decide_error_response(e),
        Ok(v) => refusal_response(v),
    }
}
