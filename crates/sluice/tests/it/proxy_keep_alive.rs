//! The proxy's connections to the upstream: kept alive and reused once a
//! response has been read to its end, whatever its framing, and a request
//! never lost to a kept connection the upstream has closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common;

use common::{Reply, Sluice, client, proxy_config, send};

/// A request of the config's pro client, sent.
async fn pro(request: reqwest::RequestBuilder) -> Reply {
    send(request.header("X-Api-Key", "demo-pro-key")).await
}

/// A raw HTTP/1.1 upstream that counts its connections and answers each
/// request by its path: `/length` (a `Content-Length` body), `/chunked`,
/// `/empty` (204, also at once to a request whose body has not all
/// arrived: it reads no body), `/closing` (a `Content-Length` body, then it
/// closes the connection without saying so, as an upstream's idle timeout
/// would).
struct RawUpstream {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl RawUpstream {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (c, r) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(serve(socket, r.clone()));
            }
        });
        Self {
            addr,
            connections,
            requests,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn serve(mut socket: tokio::net::TcpStream, requests: Arc<AtomicUsize>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            match socket.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        requests.fetch_add(1, Ordering::SeqCst);
        let path = head.split(' ').nth(1).unwrap_or("/").to_owned();
        let reply: &[u8] = match path.as_str() {
            "/chunked" => {
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            }
            "/empty" => b"HTTP/1.1 204 No Content\r\n\r\n",
            _ if head.starts_with("HEAD ") => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n",
            _ => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        };
        if socket.write_all(reply).await.is_err() {
            return;
        }
        if path == "/closing" {
            return;
        }
    }
}

fn config(upstream: &RawUpstream) -> String {
    proxy_config(&format!("http://{}", upstream.addr))
}

#[tokio::test]
async fn a_response_read_to_its_end_frees_its_connection_for_the_next() {
    let upstream = RawUpstream::start().await;
    let sluice = Sluice::start_with("proxy-keep-alive", &config(&upstream));
    let client = client();
    for path in [
        "/length", "/chunked", "/empty", "/length", "/empty", "/chunked",
    ] {
        for _ in 0..3 {
            let reply = pro(client.get(sluice.url(path))).await;
            let want = if path == "/empty" { 204 } else { 200 };
            assert_eq!(
                reply.status,
                want,
                "{path}: {}",
                String::from_utf8_lossy(&reply.body)
            );
        }
    }
    // HEAD: the upstream's Content-Length, and no body to read.
    let reply = pro(client.head(sluice.url("/length"))).await;
    assert_eq!(reply.status, 200);
    let reply = pro(client.get(sluice.url("/length"))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(upstream.requests(), 20);
    // One request at a time: every one on the first connection.
    assert_eq!(
        upstream.connections(),
        1,
        "each response freed its connection"
    );
}

#[tokio::test]
async fn a_kept_connection_the_upstream_closed_loses_no_request() {
    let upstream = RawUpstream::start().await;
    let sluice = Sluice::start_with("proxy-closing-upstream", &config(&upstream));
    let client = client();
    // Each answer is followed by a close the proxy learns of only when it
    // next reads that connection: at once after the answer, or later.
    for i in 0..30 {
        let reply = pro(client.get(sluice.url("/closing"))).await;
        assert_eq!(
            reply.status,
            200,
            "request {i}: {}",
            String::from_utf8_lossy(&reply.body)
        );
        if i % 3 == 0 {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    assert_eq!(upstream.requests(), 30);
    assert_eq!(upstream.connections(), 30);
}

#[tokio::test]
async fn a_connection_still_sending_a_body_is_not_lent_to_the_next_request() {
    let upstream = RawUpstream::start().await;
    let sluice = Sluice::start_with("proxy-early-answer", &config(&upstream));
    // A client whose body trickles: the upstream answers before it has
    // all arrived, and the proxy is still sending it on that connection.
    let mut slow = tokio::net::TcpStream::connect(sluice.data).await.unwrap();
    slow.write_all(
        b"POST /empty HTTP/1.1\r\nHost: x\r\nX-Api-Key: demo-pro-key\r\nContent-Length: 100\r\n\r\nabc",
    )
    .await
    .unwrap();
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("204") {
        let mut chunk = [0u8; 1024];
        let n = tokio::time::timeout(std::time::Duration::from_secs(10), slow.read(&mut chunk))
            .await
            .expect("the early answer arrives")
            .unwrap();
        assert!(n > 0, "the proxy closed the slow client's connection");
        seen.extend_from_slice(&chunk[..n]);
    }
    // The next request must not wait behind the rest of that body.
    let reply = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        pro(client().get(sluice.url("/length"))),
    )
    .await
    .expect("the next request is answered at once");
    assert_eq!(reply.status, 200);
    drop(slow);
}
