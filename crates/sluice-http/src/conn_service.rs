//! The router, as one connection serves it: each request carries the
//! connection's peer (`ConnectInfo<SocketAddr>`, as `axum::serve` would
//! put it: the client a PROXY protocol header named, when one did), counts
//! as in flight until its response body is sent, and has its body bounded
//! by a [`Deadline`]; a request whose body ran out of time is answered
//! [`timed_out`] (`408`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{Request, Response};
use http_body::Body as _;
use hyper::body::Incoming;
use pin_project_lite::pin_project;

use crate::body_deadline::{Deadline, Overdue, timed_out};
use crate::conn_activity::{Activity, InFlight};
use crate::sending_body::SendingBody;

/// The router, for one connection.
#[derive(Clone)]
pub struct ConnService {
    router: Router,
    peer: SocketAddr,
    activity: Arc<Activity>,
    body_timeout: Duration,
}

impl ConnService {
    /// `router` for a connection from `peer`, watched by `activity`, whose
    /// request bodies must each arrive within `body_timeout`.
    pub fn new(
        router: Router,
        peer: SocketAddr,
        activity: Arc<Activity>,
        body_timeout: Duration,
    ) -> Self {
        Self {
            router,
            peer,
            activity,
            body_timeout,
        }
    }
}

impl hyper::service::Service<Request<Incoming>> for ConnService {
    type Response = Response<SendingBody>;
    type Error = Infallible;
    type Future = ConnFuture;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let http1 = req.version() < http::Version::HTTP_2;
        let guard = self.activity.begin(!http1);
        // A request without a body (most) needs no deadline.
        let (mut req, expired) = if req.body().is_end_stream() {
            (req.map(Body::new), None)
        } else {
            let expired = Arc::new(Overdue::default());
            let timeout = self.body_timeout;
            let flag = expired.clone();
            (
                req.map(|b| Body::new(Deadline::new(b, timeout, flag))),
                Some(expired),
            )
        };
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let mut router = self.router.clone();
        ConnFuture {
            inner: tower_service::Service::call(&mut router, req),
            guard: Some(guard),
            expired,
            http1,
        }
    }
}

pin_project! {
    /// The router's response future; its body takes the request's guard.
    pub struct ConnFuture {
        #[pin]
        inner: axum::routing::future::RouteFuture<Infallible>,
        guard: Option<InFlight>,
        // Set when the request's body has a deadline.
        expired: Option<Arc<Overdue>>,
        http1: bool,
    }
}

impl Future for ConnFuture {
    type Output = Result<Response<SendingBody>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = std::task::ready!(this.inner.poll(cx))?;
        if this.expired.as_ref().is_some_and(|e| e.get()) {
            tracing::debug!("a request body did not arrive in time; answering 408");
            response = timed_out(*this.http1);
        }
        let guard = this.guard.take();
        Poll::Ready(Ok(response.map(|body| SendingBody::new(body, guard))))
    }
}
