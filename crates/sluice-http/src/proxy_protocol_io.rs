//! Reading a PROXY protocol header off a connection from a listed load
//! balancer (see [`crate::proxy_protocol`] for the format), and handing
//! the bytes read past it to the HTTP server.
//!
//! [`read_header`] reads at most [`V2_MAX`] bytes; its caller bounds the
//! wait (by `header_read_timeout`). A header may arrive in pieces; reads
//! are made in chunks, so a chunk may hold the start of the first request
//! too: [`Replayed`] gives those bytes back first.

use std::net::IpAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use ipnet::IpNet;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use crate::proxy_protocol::{Header, HeaderError, Parsed, V2_MAX, parse};

/// Why no header could be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The bytes are not a header.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The peer closed the connection before the header was complete.
    #[error("the connection closed before its PROXY protocol header was complete")]
    Closed,
    /// Reading the socket failed.
    #[error("reading the PROXY protocol header: {0}")]
    Io(#[from] std::io::Error),
}

/// The peers whose connections must start with a PROXY protocol header.
#[derive(Debug, Clone, Default)]
pub struct ProxiedPeers {
    nets: Vec<IpNet>,
}

impl ProxiedPeers {
    /// Peers in `nets`.
    pub fn new(nets: Vec<IpNet>) -> Self {
        Self { nets }
    }

    /// Whether a connection from `ip` must start with a header. An
    /// IPv4-mapped IPv6 peer is its IPv4 address.
    pub fn lists(&self, ip: IpAddr) -> bool {
        if self.nets.is_empty() {
            return false;
        }
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// Reads a header from the start of `stream`: what it says, and the bytes
/// read past it. Holds at most [`V2_MAX`] bytes and one chunk.
pub async fn read_header(stream: &TcpStream) -> Result<(Header, Vec<u8>), ReadError> {
    let mut buf = Vec::with_capacity(256);
    let mut chunk = [0u8; 512];
    loop {
        stream.readable().await?;
        let n = match stream.try_read(&mut chunk) {
            Ok(0) => return Err(ReadError::Closed),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e.into()),
        };
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        match parse(&buf)? {
            Parsed::Complete { header, len } => {
                let rest = buf.get(len..).unwrap_or_default().to_vec();
                return Ok((header, rest));
            }
            // `parse` refuses any header longer than `V2_MAX`: this is
            // only a guard.
            Parsed::Incomplete if buf.len() > V2_MAX => {
                return Err(HeaderError::V2TooLong(buf.len()).into());
            }
            Parsed::Incomplete => {}
        }
    }
}

pin_project! {
    /// A connection whose first bytes (read past a PROXY protocol header)
    /// are given back before it is read again.
    #[derive(Debug)]
    pub struct Replayed<I> {
        first: Vec<u8>,
        at: usize,
        #[pin]
        io: I,
    }
}

impl<I> Replayed<I> {
    /// `io`, read from its start.
    pub fn new(io: I) -> Self {
        Self::with_first(io, Vec::new())
    }

    /// `io`, whose next bytes are `first`.
    pub fn with_first(io: I, first: Vec<u8>) -> Self {
        Self { first, at: 0, io }
    }
}

impl<I: AsyncRead> AsyncRead for Replayed<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.project();
        let left = this.first.get(*this.at..).unwrap_or_default();
        if left.is_empty() {
            return this.io.poll_read(cx, buf);
        }
        let n = left.len().min(buf.remaining());
        buf.put_slice(left.get(..n).unwrap_or_default());
        *this.at += n;
        if *this.at >= this.first.len() {
            *this.first = Vec::new();
            *this.at = 0;
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite> AsyncWrite for Replayed<I> {
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use tokio::io::AsyncReadExt as _;

    use super::*;

    /// A connected pair: a blocking client and the server's end.
    async fn pair() -> (std::net::TcpStream, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    #[tokio::test]
    async fn a_header_in_pieces_is_read_and_the_request_behind_it_replayed() {
        let (mut client, server) = pair().await;
        let writer = std::thread::spawn(move || {
            for piece in [
                &b"PROXY TCP6 2001:db8::7 "[..],
                b"::1 4000 80\r",
                b"\nGET / HTTP/1.1\r\n\r\n",
            ] {
                client.write_all(piece).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            client
        });
        let (header, rest) = read_header(&server).await.unwrap();
        assert_eq!(
            header,
            Header::Proxied("[2001:db8::7]:4000".parse().unwrap())
        );
        let _client = writer.join().unwrap();
        let mut replayed = Replayed::with_first(server, rest);
        let mut request = vec![0u8; 18];
        replayed.read_exact(&mut request).await.unwrap();
        assert_eq!(request, b"GET / HTTP/1.1\r\n\r\n");
    }

    #[tokio::test]
    async fn a_request_without_a_header_or_a_closed_connection_is_refused() {
        let (mut client, server) = pair().await;
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        let e = read_header(&server).await.unwrap_err();
        assert!(matches!(e, ReadError::Header(HeaderError::NotProxy)), "{e}");
        let (mut client, server) = pair().await;
        client.write_all(b"PROXY TCP4 1.2.3.4").unwrap();
        drop(client);
        assert!(matches!(read_header(&server).await, Err(ReadError::Closed)));
        // A header of endless UNKNOWN text stops at the v1 bound.
        let (mut client, server) = pair().await;
        client
            .write_all(&[b"PROXY UNKNOWN ".as_slice(), &[b'a'; 600]].concat())
            .unwrap();
        assert!(matches!(
            read_header(&server).await,
            Err(ReadError::Header(HeaderError::V1TooLong))
        ));
    }

    #[test]
    fn listed_peers_include_mapped_ipv4() {
        let peers = ProxiedPeers::new(vec!["10.0.0.0/8".parse().unwrap()]);
        assert!(peers.lists("10.1.2.3".parse().unwrap()));
        assert!(peers.lists("::ffff:10.1.2.3".parse().unwrap()));
        assert!(!peers.lists("192.0.2.1".parse().unwrap()));
        assert!(!ProxiedPeers::default().lists("10.1.2.3".parse().unwrap()));
    }
}
