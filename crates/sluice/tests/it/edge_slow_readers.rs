//! Slow readers in proxy mode: clients that send requests for a large
//! upstream body and never read the answer (HTTP/1.1: a small receive
//! buffer left full; HTTP/2: no flow-control window granted). Each such
//! request holds its connection and its place under
//! `upstream_max_in_flight`; no other timeout applies while a response is
//! being sent, and HTTP/2's pings are answered. `send_timeout` bounds it:
//! a response frame not taken for that long closes the connection, and the
//! places come back without the client's help. (Before it, the places were
//! held for as long as the client stayed connected, and one HTTP/2
//! connection could hold all of them.)
//!
//! The waits below are guards against hangs, generous beside the 1 s
//! timeouts configured.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Sluice;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// A guard against hangs, not a timing assertion.
const GUARD: Duration = Duration::from_secs(20);

/// The large body: far more than every socket buffer on the way holds.
const BIG: u64 = 256 << 20;

/// An upstream that answers `/big` with [`BIG`] bytes, written as fast as
/// the connection takes them, and anything else with a short body. Counts
/// the `/big` requests; stopped on drop.
struct BigUpstream {
    addr: SocketAddr,
    big: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BigUpstream {
    fn start() -> Self {
        let big = Arc::new(AtomicUsize::new(0));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let counter = big.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("upstream runtime");
            rt.block_on(async move {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
                ready_tx.send(listener.local_addr().expect("addr")).unwrap();
                let accept = async {
                    while let Ok((conn, _)) = listener.accept().await {
                        tokio::spawn(serve_upstream(conn, counter.clone()));
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stopped => {}
                }
            });
        });
        let addr = ready_rx.recv_timeout(GUARD).expect("the upstream started");
        Self {
            addr,
            big,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    fn big_requests(&self) -> usize {
        self.big.load(Ordering::SeqCst)
    }
}

impl Drop for BigUpstream {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Serves keep-alive `GET`s on one connection until it fails.
async fn serve_upstream(mut conn: TcpStream, big: Arc<AtomicUsize>) {
    let mut pending = Vec::new();
    let mut buf = [0u8; 4096];
    let chunk = vec![b'x'; 64 * 1024];
    loop {
        let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") else {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
            continue;
        };
        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..end + 4);
        if head.split_whitespace().nth(1) == Some("/big") {
            big.fetch_add(1, Ordering::SeqCst);
            let h = format!("HTTP/1.1 200 OK\r\nContent-Length: {BIG}\r\n\r\n");
            if conn.write_all(h.as_bytes()).await.is_err() {
                return;
            }
            let mut left = BIG;
            while left > 0 {
                let n = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                if conn.write_all(&chunk[..n]).await.is_err() {
                    return;
                }
                left -= n as u64;
            }
        } else {
            let small = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
            if conn.write_all(small).await.is_err() {
                return;
            }
        }
    }
}

/// Sluice in front of `upstream`, with every timeout at 1 s (`send_timeout`
/// included), `server`
/// added, and a per-IP limit far above what the test sends.
fn start(label: &str, upstream: &BigUpstream, server: &str) -> Sluice {
    Sluice::start_with(
        label,
        &format!(
            "upstream = \"http://{}\"\n\n[server]\n{server}\n\
             header_read_timeout = \"1s\"\nidle_timeout = \"1s\"\nbody_timeout = \"1s\"\n\
             send_timeout = \"1s\"\n\
             upstream_response_timeout = \"1s\"\n\
             http2_keepalive_interval = \"1s\"\nhttp2_keepalive_timeout = \"1s\"\n\n\
             [[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"100000/s\"\n",
            upstream.addr
        ),
    )
}

/// A connection to `to` from `from` (any 127.0.0.0/8 address is this
/// host), with a receive buffer of `rcvbuf` bytes if given.
async fn connect_from(from: Ipv4Addr, to: SocketAddr, rcvbuf: Option<u32>) -> TcpStream {
    let socket = TcpSocket::new_v4().expect("socket");
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size).expect("SO_RCVBUF");
    }
    socket
        .bind(SocketAddr::new(IpAddr::V4(from), 0))
        .expect("bind");
    tokio::time::timeout(GUARD, socket.connect(to))
        .await
        .expect("connect in time")
        .expect("connect")
}

/// `GET path` from `from` on a fresh connection: the whole answer.
async fn get_from(from: Ipv4Addr, s: &Sluice, path: &str) -> String {
    let mut stream = connect_from(from, s.data, None).await;
    let head = format!("GET {path} HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(head.as_bytes()).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(GUARD, stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// An HTTP/1.1 slow reader: `GET /big` from `from` with a 4 KiB receive
/// buffer, never read.
async fn http1_slow_reader(from: Ipv4Addr, s: &Sluice) -> TcpStream {
    let mut stream = connect_from(from, s.data, Some(4096)).await;
    stream
        .write_all(b"GET /big HTTP/1.1\r\nHost: sluice.test\r\n\r\n")
        .await
        .expect("send the request");
    stream
}

/// Waits until the upstream has seen `n` requests for `/big`.
async fn wait_big(upstream: &BigUpstream, n: usize, s: &Sluice) {
    let start = Instant::now();
    while upstream.big_requests() < n {
        assert!(
            start.elapsed() < GUARD,
            "{} of {n} slow requests reached the upstream; log:\n{}",
            upstream.big_requests(),
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How many connections the data plane closed for a response not taken.
async fn closed_for_slow_send(s: &Sluice) -> u64 {
    let r = common::send(common::client().get(s.control_url("/metrics"))).await;
    String::from_utf8_lossy(&r.body)
        .lines()
        .find(|l| {
            l.starts_with("sluice_connections_closed")
                && l.contains("listener=\"data\"")
                && l.contains("reason=\"slow_send\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Reads `stream` until Sluice closes it: how many bytes came (fewer than
/// the body: it was cut off, not sent).
async fn read_until_closed(mut stream: TcpStream) -> u64 {
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    loop {
        match tokio::time::timeout(GUARD, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => return total,
            Ok(Ok(n)) => total += n as u64,
            Err(_) => panic!("the slow reader was never closed"),
        }
    }
}

/// Polls `GET /small` from `from` until it is served (within the guard).
async fn wait_served(from: Ipv4Addr, s: &Sluice) {
    let start = Instant::now();
    loop {
        let r = get_from(from, s, "/small").await;
        if r.starts_with("HTTP/1.1 200") {
            return;
        }
        assert!(
            start.elapsed() < GUARD,
            "places were not given back: {r}\nlog:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const SLOW_A: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const OTHER: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const SLOW_B: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_slow_readers_are_cut_off_after_the_send_timeout() {
    let upstream = BigUpstream::start();
    let s = start(
        "slow-readers-h1",
        &upstream,
        "upstream_max_in_flight = 2\nmax_connections_per_ip = 2",
    );
    let slow = [
        http1_slow_reader(SLOW_A, &s).await,
        http1_slow_reader(SLOW_B, &s).await,
    ];
    wait_big(&upstream, 2, &s).await;
    // The places come back without the slow clients closing anything...
    wait_served(OTHER, &s).await;
    // ...because Sluice closed their connections, mid-body.
    for stream in slow {
        assert!(read_until_closed(stream).await < BIG);
    }
    assert!(closed_for_slow_send(&s).await >= 2, "log:\n{}", s.log());
}

/// One HTTP/2 connection (prior knowledge) from `from` that opens
/// `streams` streams, each a `GET path`, and grants the server no
/// flow-control window: it gets the answers' heads and never a byte of
/// their bodies. It acknowledges the server's SETTINGS and answers its
/// PINGs, as any client library does. Returns how many `200` heads have
/// arrived (counted as they come) and the task holding the connection.
async fn http2_slow_reader(
    from: Ipv4Addr,
    s: &Sluice,
    path: &str,
    streams: u32,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let mut stream = connect_from(from, s.data, None).await;
    let frame = |kind: u8, flags: u8, id: u32, payload: &[u8]| -> Vec<u8> {
        let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
        let mut f = vec![len[1], len[2], len[3], kind, flags];
        f.extend_from_slice(&id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    };
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    // SETTINGS_INITIAL_WINDOW_SIZE = 0: no stream may carry DATA.
    out.extend(frame(0x4, 0, 0, &[0, 4, 0, 0, 0, 0]));
    for i in 0..streams {
        // HPACK: :method GET, :scheme http (static), :path and :authority
        // literal without indexing, names from the static table.
        let mut block = vec![0x82, 0x86, 0x04, u8::try_from(path.len()).unwrap()];
        block.extend_from_slice(path.as_bytes());
        block.extend_from_slice(&[0x01, 11]);
        block.extend_from_slice(b"sluice.test");
        // END_STREAM | END_HEADERS.
        out.extend(frame(0x1, 0x5, 2 * i + 1, &block));
    }
    stream.write_all(&out).await.expect("send the streams");
    let heads = Arc::new(AtomicUsize::new(0));
    let counted = heads.clone();
    let task = tokio::spawn(async move {
        loop {
            let mut header = [0u8; 9];
            if stream.read_exact(&mut header).await.is_err() {
                return;
            }
            let len = u32::from_be_bytes([0, header[0], header[1], header[2]]) as usize;
            let (kind, flags) = (header[3], header[4]);
            let mut payload = vec![0u8; len];
            if stream.read_exact(&mut payload).await.is_err() {
                return;
            }
            let ack = match kind {
                // `:status: 200` is entry 8 of HPACK's static table.
                0x1 if payload.first() == Some(&0x88) => {
                    counted.fetch_add(1, Ordering::SeqCst);
                    None
                }
                0x4 if flags & 1 == 0 => Some(frame(0x4, 1, 0, &[])),
                0x6 if flags & 1 == 0 => Some(frame(0x6, 1, 0, &payload)),
                0x7 => return,
                _ => None,
            };
            if let Some(ack) = ack
                && stream.write_all(&ack).await.is_err()
            {
                return;
            }
        }
    });
    (heads, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_connection_that_grants_no_window_is_cut_off() {
    let upstream = BigUpstream::start();
    let s = start(
        "slow-readers-h2",
        &upstream,
        "upstream_max_in_flight = 3\nmax_connections_per_ip = 1",
    );
    // One connection, the most its client may open, three streams, each
    // holding a place, pings answered.
    let (heads, conn) = http2_slow_reader(SLOW_A, &s, "/big", 3).await;
    wait_big(&upstream, 3, &s).await;
    let start = Instant::now();
    while heads.load(Ordering::SeqCst) < 3 {
        assert!(start.elapsed() < GUARD, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Sluice closes the connection, and the places come back.
    tokio::time::timeout(GUARD, conn)
        .await
        .expect("the connection that grants no window was never closed")
        .expect("the reader task");
    wait_served(OTHER, &s).await;
    assert!(closed_for_slow_send(&s).await >= 1, "log:\n{}", s.log());
}
