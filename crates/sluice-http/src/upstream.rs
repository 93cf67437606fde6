//! The proxy's connections to its upstream: HTTP/1.1, kept alive, one
//! request at a time on each, reused newest first.
//!
//! A connection goes back to the pool when its response has been read to
//! the end (see [`Returning`]); one whose response was cut short is
//! closed. A pooled connection that the upstream closed before a request
//! could be written to it gives the request back, which is sent again on
//! another (the one retry a proxy may make for any method, since the
//! upstream saw nothing). The pool holds at most as many connections as
//! requests may be in flight, and closes those idle for
//! [`IDLE_TIMEOUT`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// How long a connection may wait in the pool before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the upstream gave no response.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The upstream's address could not be resolved or connected to.
    #[error("cannot connect to the upstream: {0}")]
    Connect(#[source] std::io::Error),
    /// Connecting took longer than the connect timeout.
    #[error("connecting to the upstream timed out")]
    ConnectTimeout,
    /// The connection failed while the request was sent or the response
    /// head read.
    #[error("the upstream connection failed: {0}")]
    Http(#[source] hyper::Error),
}

/// One upstream's address and its pool of idle connections.
#[derive(Debug)]
pub struct Upstream {
    /// The host to connect to, without an IPv6 literal's brackets.
    host: Box<str>,
    port: u16,
    connect_timeout: Duration,
    most_idle: usize,
    idle: Mutex<VecDeque<Idle>>,
}

#[derive(Debug)]
struct Idle {
    tx: SendRequest<Body>,
    since: Instant,
}

impl Upstream {
    /// The upstream at `uri`'s authority (port 80 when it names none),
    /// keeping at most `most_idle` connections idle.
    pub fn new(uri: &Uri, connect_timeout: Duration, most_idle: usize) -> Self {
        let host = uri.host().unwrap_or("localhost");
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Self {
            host: host.into(),
            port: uri.port_u16().unwrap_or(80),
            connect_timeout,
            most_idle,
            idle: Mutex::new(VecDeque::new()),
        }
    }

    /// Sends `req` (in origin form) on a pooled connection or a new one,
    /// and returns the response head with the connection it came on, to
    /// go back to the pool once the body has been read.
    pub async fn send(
        self: &Arc<Self>,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, Lease), UpstreamError> {
        loop {
            let (mut tx, pooled) = match self.checkout() {
                Some(tx) => (tx, true),
                None => (self.connect().await?, false),
            };
            if pooled && tx.ready().await.is_err() {
                continue;
            }
            match tx.try_send_request(req).await {
                Ok(response) => {
                    let lease = Lease {
                        tx: Some(tx),
                        pool: self.clone(),
                    };
                    return Ok((response, lease));
                }
                Err(mut e) => match e.take_message() {
                    // Closed before the request was written: the upstream
                    // saw nothing of it.
                    Some(back) if pooled => req = back,
                    _ => return Err(UpstreamError::Http(e.into_error())),
                },
            }
        }
    }

    /// The newest idle connection still open.
    fn checkout(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock();
        while let Some(c) = idle.pop_back() {
            if !c.tx.is_closed() {
                return Some(c.tx);
            }
        }
        None
    }

    /// A connection back into the pool; the stale ones and any beyond the
    /// cap are closed.
    fn put(&self, tx: SendRequest<Body>) {
        if tx.is_closed() {
            return;
        }
        let now = Instant::now();
        let mut idle = self.idle.lock();
        while idle
            .front()
            .is_some_and(|c| now.duration_since(c.since) >= IDLE_TIMEOUT)
        {
            idle.pop_front();
        }
        if idle.len() < self.most_idle {
            idle.push_back(Idle { tx, since: now });
        }
    }

    async fn connect(&self) -> Result<SendRequest<Body>, UpstreamError> {
        let connecting = TcpStream::connect((&*self.host, self.port));
        let stream = tokio::time::timeout(self.connect_timeout, connecting)
            .await
            .map_err(|_| UpstreamError::ConnectTimeout)?
            .map_err(UpstreamError::Connect)?;
        // Requests are written whole: no reason to wait for more.
        let _ = stream.set_nodelay(true);
        let (tx, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(UpstreamError::Http)?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "upstream connection failed");
            }
        });
        Ok(tx)
    }
}

/// A connection in use, back to the pool when dropped if its response was
/// read to the end.
#[derive(Debug)]
pub struct Lease {
    tx: Option<SendRequest<Body>>,
    pool: Arc<Upstream>,
}

impl Lease {
    fn give_back(&mut self) {
        if let Some(tx) = self.tx.take() {
            self.pool.put(tx);
        }
    }
}

/// A response body that gives its connection back once read to the end (a
/// connection whose response was cut short is closed, since the rest of
/// that response would still arrive on it).
#[derive(Debug)]
pub struct Returning {
    body: Incoming,
    lease: Lease,
}

impl Drop for Returning {
    fn drop(&mut self) {
        // hyper's server does not poll a body that says it has ended (a
        // Content-Length reached, or no body at all).
        if http_body::Body::is_end_stream(&self.body) {
            self.lease.give_back();
        }
    }
}

impl Returning {
    /// `body`, giving `lease` back at its end.
    pub fn new(body: Incoming, lease: Lease) -> Self {
        Self { body, lease }
    }
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let frame = std::task::ready!(Pin::new(&mut this.body).poll_frame(cx));
        if frame.is_none() {
            this.lease.give_back();
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
