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
//! [`IDLE_TIMEOUT`]: as it is used, and every half of that while it is not.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
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
    /// Whether the task that closes stale idle connections has started.
    sweeping: AtomicBool,
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
            sweeping: AtomicBool::new(false),
        }
    }

    /// How many connections wait idle in the pool.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.idle.lock().len()
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

    /// The newest idle connection ready for a request. One that is not is
    /// dropped (it closes once its work is done): its response was read,
    /// but it may still be sending that request's body, as a client sends
    /// it, to an upstream that answered early; the next request must not
    /// wait behind it.
    fn checkout(&self) -> Option<SendRequest<Body>> {
        let mut idle = self.idle.lock();
        while let Some(c) = idle.pop_back() {
            if c.tx.is_ready() {
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
        close_stale(&mut idle, now);
        if idle.len() < self.most_idle {
            idle.push_back(Idle { tx, since: now });
        }
    }

    async fn connect(self: &Arc<Self>) -> Result<SendRequest<Body>, UpstreamError> {
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
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(Arc::downgrade(self)));
        }
        Ok(tx)
    }
}

/// Closes the connections idle for [`IDLE_TIMEOUT`] (the oldest are at the
/// front).
fn close_stale(idle: &mut VecDeque<Idle>, now: Instant) {
    while idle
        .front()
        .is_some_and(|c| now.duration_since(c.since) >= IDLE_TIMEOUT)
    {
        idle.pop_front();
    }
}

/// Closes the pool's stale connections every half [`IDLE_TIMEOUT`], so
/// that a pool no request uses does not hold them; ends with the pool.
async fn sweep(pool: Weak<Upstream>) {
    let mut every = tokio::time::interval(IDLE_TIMEOUT / 2);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let Some(pool) = pool.upgrade() else { return };
        close_stale(&mut pool.idle.lock(), Instant::now());
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

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// An upstream that answers every request on a connection with `ok`.
    async fn upstream() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n @ 1..) = socket.read(&mut buf).await {
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            if socket.write_all(ok).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    /// A pool of at most `most_idle` idle connections to a new upstream.
    async fn pool(most_idle: usize) -> Arc<Upstream> {
        let addr = upstream().await;
        let uri: Uri = format!("http://{addr}").parse().unwrap();
        Arc::new(Upstream::new(&uri, Duration::from_secs(5), most_idle))
    }

    fn get() -> Request<Body> {
        Request::get("/").body(Body::empty()).unwrap()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_response_cut_short_closes_its_connection() {
        let pool = pool(8).await;
        let (response, lease) = pool.send(get()).await.unwrap();
        // Dropped unread: the rest of its body would still come on that
        // connection, ahead of the next response.
        drop(Returning::new(response.into_body(), lease));
        assert_eq!(pool.idle(), 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn the_pool_keeps_no_more_idle_connections_than_its_cap() {
        let pool = pool(2).await;
        // Three at once: three connections, each read to its end.
        let mut bodies = Vec::new();
        for _ in 0..3 {
            let (response, lease) = pool.send(get()).await.unwrap();
            bodies.push(Returning::new(response.into_body(), lease));
        }
        for body in bodies {
            assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
        }
        assert_eq!(pool.idle(), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_idle_connection_is_closed_though_no_request_comes() {
        let pool = pool(8).await;
        let (response, lease) = pool.send(get()).await.unwrap();
        let body = Returning::new(response.into_body(), lease);
        assert_eq!(body.collect().await.unwrap().to_bytes(), "ok");
        assert_eq!(pool.idle(), 1, "read to its end, back in the pool");
        tokio::time::pause();
        tokio::time::advance(IDLE_TIMEOUT - Duration::from_secs(1)).await;
        assert_eq!(pool.idle(), 1, "not stale yet");
        // The sweep runs every half timeout: within one more, it is closed.
        tokio::time::advance(IDLE_TIMEOUT / 2 + Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
        assert_eq!(pool.idle(), 0, "closed with no request to close it");
    }
}
