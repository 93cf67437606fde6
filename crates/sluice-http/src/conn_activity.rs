//! What one connection is doing, seen from its socket and its requests, so
//! that a watchdog can close it when it is slow or idle for too long.
//!
//! A connection is in one of three states:
//!
//! - **idle**: no request in flight, and no byte since the last response
//!   (or since it opened): it may stay so for `idle_timeout` (for a fresh
//!   connection, `header_read_timeout`: a silent connection is closed as
//!   soon as a slow one);
//! - **reading a head**: bytes have come since it was idle, but no request
//!   has started yet: the head must be complete within
//!   `header_read_timeout` of its first byte (this is what closes a client
//!   that sends one header byte every few seconds);
//! - **busy**: a request is in flight, until its response body is sent.
//!   A response whose last frame was handed to the connection and not
//!   taken back for `send_timeout` is a reader that does not read (its
//!   socket buffer full, or, on HTTP/2, no flow-control window granted):
//!   the connection is closed, as nginx's `send_timeout` does. Waiting on
//!   the upstream for the next frame is not a stall.
//!
//! The socket wrapper ([`WatchedIo`]) notes the first byte after idle; the
//! request guard ([`InFlight`]) notes when requests start and end. On an
//! HTTP/2 connection, bytes between requests are pings and settings as
//! often as heads, so after its first request only the idle timeout
//! applies (and its own keep-alive pings find dead peers). Each
//! note is a relaxed atomic, and the clock is read once per request.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

/// What one connection is doing.
#[derive(Debug)]
pub struct Activity {
    start: Instant,
    in_flight: AtomicU32,
    served: AtomicU64,
    /// Milliseconds from `start` to when the connection last became idle.
    idle_since: AtomicU64,
    /// Whether bytes have arrived since it became idle.
    reading: AtomicBool,
    /// Milliseconds from `start` to the first of those bytes.
    reading_since: AtomicU64,
    /// Whether it speaks HTTP/2, whose pings and settings are bytes that
    /// start no request head: once it has served a request, only the idle
    /// timeout applies.
    http2: AtomicBool,
    /// The requests whose response handed the connection a frame that it
    /// has not sent yet (it has not asked for the next one): request id,
    /// and milliseconds from `start` to the hand-over. At most one entry
    /// per request in flight.
    sending: parking_lot::Mutex<Vec<(u64, u64)>>,
    /// The next request's id.
    next_id: AtomicU64,
}

/// Why the watchdog closes a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expired {
    /// A request head took longer than `header_read_timeout`.
    Header,
    /// No request for `idle_timeout`.
    Idle,
    /// A response frame not taken for `send_timeout`: a reader that does
    /// not read.
    Send,
}

impl Activity {
    /// A connection opened now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            start: Instant::now(),
            in_flight: AtomicU32::new(0),
            served: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            reading: AtomicBool::new(false),
            reading_since: AtomicU64::new(0),
            http2: AtomicBool::new(false),
            sending: parking_lot::Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.start + Duration::from_millis(ms)
    }

    /// Notes bytes read from the socket.
    fn read_some(&self) {
        if self.in_flight.load(Ordering::Relaxed) == 0
            && !self.reading.load(Ordering::Relaxed)
            && !self.http2.load(Ordering::Relaxed)
        {
            self.reading_since.store(self.now_ms(), Ordering::Relaxed);
            self.reading.store(true, Ordering::Relaxed);
        }
    }

    /// Notes a request's start (`http2`: it came over HTTP/2); the guard
    /// notes its end when dropped.
    pub fn begin(self: &Arc<Self>, http2: bool) -> InFlight {
        if http2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.reading.store(false, Ordering::Relaxed);
        InFlight {
            activity: self.clone(),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            handed: false,
        }
    }

    /// When the connection expires if nothing happens before, and why;
    /// while a request is in flight, only a response frame not taken for
    /// `send` makes it expire.
    pub fn deadline(
        &self,
        header_read: Duration,
        idle: Duration,
        send: Duration,
    ) -> Option<(Instant, Expired)> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            let oldest = self.sending.lock().iter().map(|&(_, since)| since).min()?;
            return Some((self.at(oldest) + send, Expired::Send));
        }
        if self.reading.load(Ordering::Relaxed) {
            let since = self.at(self.reading_since.load(Ordering::Relaxed));
            return Some((since + header_read, Expired::Header));
        }
        let since = self.at(self.idle_since.load(Ordering::Relaxed));
        // A connection that never sent a request gets the header timeout.
        if self.served.load(Ordering::Relaxed) == 0 {
            return Some((since + header_read, Expired::Header));
        }
        Some((since + idle, Expired::Idle))
    }
}

/// A request in flight on a connection; dropped when its response body has
/// been sent (or abandoned).
#[derive(Debug)]
pub struct InFlight {
    activity: Arc<Activity>,
    id: u64,
    /// Whether its entry is in the connection's `sending` list: the list
    /// is locked only when this changes.
    handed: bool,
}

impl InFlight {
    /// Notes that the response handed the connection a frame: until the
    /// connection asks for the next ([`taken`](Self::taken)), the frame
    /// waits on the client.
    pub fn handed(&mut self) {
        if self.handed {
            return;
        }
        let a = &self.activity;
        let now = a.now_ms();
        a.sending.lock().push((self.id, now));
        self.handed = true;
    }

    /// Notes that the connection asked for the response's next frame: the
    /// last one has been taken.
    pub fn taken(&mut self) {
        if !self.handed {
            return;
        }
        let id = self.id;
        self.activity.sending.lock().retain(|&(i, _)| i != id);
        self.handed = false;
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.taken();
        let a = &self.activity;
        a.served.fetch_add(1, Ordering::Relaxed);
        a.idle_since.store(a.now_ms(), Ordering::Relaxed);
        a.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

pin_project! {
    /// A socket that notes when bytes arrive.
    #[derive(Debug)]
    pub struct WatchedIo<I> {
        #[pin]
        io: I,
        activity: Arc<Activity>,
    }
}

impl<I> WatchedIo<I> {
    /// Watches `io` for `activity`.
    pub fn new(io: I, activity: Arc<Activity>) -> Self {
        Self { io, activity }
    }
}

impl<I: AsyncRead> AsyncRead for WatchedIo<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let result = this.io.poll_read(cx, buf);
        if buf.filled().len() > before {
            this.activity.read_some();
        }
        result
    }
}

impl<I: AsyncWrite> AsyncWrite for WatchedIo<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<Result<usize, std::io::Error>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), std::io::Error>> {
        self.project().io.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<Result<usize, std::io::Error>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}
