//! Serving a router on a listener without letting slow, idle or piled-up
//! connections starve it.
//!
//! - **Caps.** Each accepted connection takes a place in the listener's
//!   [`ConnLimits`]: `max_connections` in all and `max_connections_per_ip`
//!   from one client network (an IPv6 client's /64 by default; trusted
//!   proxies are exempt). A connection over a cap is answered at once, with
//!   what fits in the socket's buffer without waiting (`503` when the
//!   listener is full, `429` when the client is, both with
//!   `Connection: close` and `Retry-After: 1`), and closed.
//! - **Timeouts.** A watchdog beside each connection closes it when a
//!   request head takes longer than `header_read_timeout`, or when it sits
//!   idle for `idle_timeout` (see [`crate::conn_activity`]). A request body
//!   must arrive within `body_timeout` of its head, or the request is
//!   answered `408` and the connection closed (see
//!   [`crate::body_deadline`]). HTTP/2 connections are also pinged every
//!   `http2_keepalive_interval`, and closed when a ping goes unanswered
//!   for `http2_keepalive_timeout`.
//! - **The PROXY protocol.** A connection from a peer in `proxy_protocol`
//!   (a layer-4 load balancer) must start with a PROXY protocol header
//!   (v1 or v2), read within `header_read_timeout` and at most about 4 KiB
//!   (see [`crate::proxy_protocol_io`]); without a valid one it is closed.
//!   The client it names is then the connection's peer for everything
//!   else: the per-client cap, trusted-proxy rules, `ip` keys and access
//!   lists. The balancer itself counts only against `max_connections`.
//!   Bytes from other peers are HTTP, never read as a header.
//! - **Accept errors** (out of file descriptors, say) back off, from 5 ms
//!   doubling to 1 s, instead of spinning, and are logged at most once a
//!   second.
//! - **Shutdown.** When `shutdown` completes, the listener stops
//!   accepting, every connection is asked to finish its request in flight
//!   and close, and `serve` returns once they have.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use ipnet::IpNet;
use sluice_policy::Engine;
use sluice_policy::server_settings::ConnectionSettings;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::conn_activity::{Activity, Expired, WatchedIo};
use crate::conn_limits::{ConnLimits, ConnPermit, Refused};
use crate::conn_service::ConnService;
use crate::proxy_protocol::Header;
use crate::proxy_protocol_io::{ProxiedPeers, Replayed, read_header};

/// The first accept-error backoff, doubled up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(5);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What a refused connection is sent, if its socket takes it at once.
const FULL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n";
const PER_CLIENT: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: 0\r\nretry-after: 1\r\nconnection: close\r\n\r\n";

/// One listener, served with its settings.
#[derive(Debug)]
pub struct Listener {
    listener: TcpListener,
    settings: ConnectionSettings,
    limits: Arc<ConnLimits>,
    engine: Arc<Engine>,
    proxied: ProxiedPeers,
}

impl Listener {
    /// Serves `listener` with `settings`; `engine`'s policy says which
    /// peers are trusted proxies and how client networks are told apart.
    pub fn new(listener: TcpListener, settings: ConnectionSettings, engine: Arc<Engine>) -> Self {
        let limits = ConnLimits::new(settings.max_connections, settings.max_connections_per_ip);
        let proxied = ProxiedPeers::new(settings.proxy_protocol.clone());
        Self {
            listener,
            settings,
            limits,
            engine,
            proxied,
        }
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The connection caps and what they hold now.
    pub fn limits(&self) -> &Arc<ConnLimits> {
        &self.limits
    }

    /// Serves `router` until `shutdown` completes, then lets the requests
    /// in flight finish and returns once every connection has closed.
    pub async fn serve(self, router: Router, shutdown: watch::Receiver<bool>) {
        // Turn every handler into a route once, not on every request (what
        // `into_make_service` does for `axum::serve`).
        let router: Router = router.with_state(());
        let builder = Arc::new(builder(&self.settings));
        // Every connection task holds a sender: when the last is gone, all
        // connections have closed.
        let (open_tx, mut all_closed) = mpsc::channel::<()>(1);
        let mut stop = shutdown.clone();
        let mut backoff = MIN_BACKOFF;
        let mut last_warning: Option<tokio::time::Instant> = None;
        loop {
            let accepted = tokio::select! {
                accepted = self.listener.accept() => accepted,
                _ = stop.wait_for(|s| *s) => break,
            };
            let (stream, peer) = match accepted {
                Ok(a) => {
                    backoff = MIN_BACKOFF;
                    a
                }
                Err(e) if is_per_connection(&e) => continue,
                Err(e) => {
                    if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                        tracing::warn!(error = %e, open = self.limits.open(), "cannot accept connections; backing off");
                        last_warning = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            };
            // A balancer's connection counts against its client, once its
            // header names one.
            let proxied = self.proxied.lists(peer.ip());
            let client = if proxied {
                None
            } else {
                client_of(&self.engine, peer.ip())
            };
            let permit = match self.limits.try_acquire(client) {
                Ok(p) => p,
                Err(why) => {
                    refuse(&stream, why);
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let mut conn = Connection {
                builder: builder.clone(),
                router: router.clone(),
                timeouts: Timeouts::of(&self.settings),
                shutdown: shutdown.clone(),
                limits: self.limits.clone(),
                engine: self.engine.clone(),
            };
            let open = open_tx.clone();
            tokio::spawn(async move {
                let admitted = if proxied {
                    conn.read_proxy_header(stream, peer, permit).await
                } else {
                    Some((Replayed::new(stream), peer, permit))
                };
                if let Some((io, peer, permit)) = admitted {
                    conn.run(io, peer).await;
                    drop(permit);
                }
                drop(open);
            });
        }
        drop(self.listener);
        drop(open_tx);
        let _ = all_closed.recv().await;
    }
}

/// Accept errors that concern one connection only (it was reset before it
/// was accepted, say): the next accept may succeed at once.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted | WouldBlock
    )
}

/// The client network a connection from `ip` counts against; `None` for
/// a trusted proxy, which is exempt.
fn client_of(engine: &Engine, ip: IpAddr) -> Option<IpNet> {
    engine.read_policy(|policy| (!policy.trusts(ip)).then(|| policy.network_of(ip)))
}

/// Tells a refused client why, if its socket takes the answer at once, and
/// closes the connection.
fn refuse(stream: &TcpStream, why: Refused) {
    let answer = match why {
        Refused::Full => FULL,
        Refused::PerClient => PER_CLIENT,
    };
    let _ = stream.try_write(answer);
    tracing::debug!(?why, "connection refused");
}

fn builder(settings: &ConnectionSettings) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // HTTP/1 head and idle timeouts are the watchdog's (hyper's own header
    // timer would also close idle keep-alive connections early).
    builder.http1().keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .keep_alive_interval(settings.http2_keepalive_interval)
        .keep_alive_timeout(settings.http2_keepalive_timeout);
    builder
}

/// The timeouts a connection's watchdog and requests keep.
#[derive(Debug, Clone, Copy)]
struct Timeouts {
    header_read: Duration,
    idle: Duration,
    body: Duration,
    send: Duration,
}

impl Timeouts {
    fn of(settings: &ConnectionSettings) -> Self {
        Self {
            header_read: settings.header_read_timeout,
            idle: settings.idle_timeout,
            body: settings.body_timeout,
            send: settings.send_timeout,
        }
    }
}

/// One accepted connection.
struct Connection {
    builder: Arc<auto::Builder<TokioExecutor>>,
    router: Router,
    timeouts: Timeouts,
    shutdown: watch::Receiver<bool>,
    /// Where closures are counted.
    limits: Arc<ConnLimits>,
    /// Whose policy says which clients are trusted proxies.
    engine: Arc<Engine>,
}

/// A connection ready to serve: its socket (with any bytes read past a
/// PROXY protocol header), its peer, and its place under the caps.
type Admitted = (Replayed<TcpStream>, SocketAddr, ConnPermit);

impl Connection {
    /// Reads the PROXY protocol header a listed peer must send first,
    /// within the header timeout; its client becomes the peer and is
    /// counted against its cap. `None`: the connection is closed (no valid
    /// header in time, its client's share full, or shutting down).
    async fn read_proxy_header(
        &mut self,
        stream: TcpStream,
        peer: SocketAddr,
        mut permit: ConnPermit,
    ) -> Option<Admitted> {
        let read = tokio::select! {
            read = tokio::time::timeout(self.timeouts.header_read, read_header(&stream)) => read,
            _ = self.shutdown.wait_for(|s| *s) => return None,
        };
        let (header, first) = match read {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "closing a connection without a valid PROXY protocol header");
                return None;
            }
            Err(_) => {
                tracing::debug!(%peer, "closing a connection whose PROXY protocol header was too slow");
                let slow = &self.limits.closed_slow_head;
                slow.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                return None;
            }
        };
        let peer = match header {
            Header::Proxied(client) => client,
            Header::Local => peer,
        };
        if let Some(net) = client_of(&self.engine, peer.ip())
            && let Err(why) = permit.count_client(net)
        {
            refuse(&stream, why);
            return None;
        }
        Some((Replayed::with_first(stream, first), peer, permit))
    }

    async fn run(mut self, io: Replayed<TcpStream>, peer: SocketAddr) {
        let activity = Activity::new();
        let io = TokioIo::new(WatchedIo::new(io, activity.clone()));
        let Timeouts {
            header_read,
            idle,
            body,
            send,
        } = self.timeouts;
        let service = ConnService::new(self.router.clone(), peer, activity.clone(), body);
        let conn = self.builder.serve_connection(io, service);
        tokio::pin!(conn);
        // Checked again this often while a request is in flight.
        let busy_recheck = header_read.min(idle).min(send);
        let mut stopping = false;
        loop {
            let (wake, expires) = match activity.deadline(header_read, idle, send) {
                Some((at, why)) => (at, Some(why)),
                None => (tokio::time::Instant::now() + busy_recheck, None),
            };
            tokio::select! {
                _ = conn.as_mut() => return,
                () = tokio::time::sleep_until(wake) => {
                    // Expired only if nothing changed while it slept.
                    if let (Some(why), Some((at, again))) = (expires, activity.deadline(header_read, idle, send))
                        && again == why
                        && at <= tokio::time::Instant::now()
                    {
                        tracing::debug!(%peer, ?why, "closing a slow or idle connection");
                        let counter = match why {
                            Expired::Header => &self.limits.closed_slow_head,
                            Expired::Idle => &self.limits.closed_idle,
                            Expired::Send => &self.limits.closed_slow_send,
                        };
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        return;
                    }
                }
                // On shutdown, the request in flight finishes, then the
                // connection closes; the watchdog still closes it if it is
                // slow or idle.
                _ = self.shutdown.wait_for(|s| *s), if !stopping => {
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}
