//! The reverse proxy to the upstream.
//!
//! An admitted request is forwarded with its method, path, query, headers
//! (less hop-by-hop ones) and body, streamed; the upstream's answer streams
//! back. An unreachable upstream is a 502 problem.

use std::time::Duration;

use axum::body::Body;
use http::header::{CONNECTION, HeaderName};
use http::{HeaderMap, Request, Response, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

/// Why a request could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream URI could not be built.
    #[error("cannot build the upstream URI: {0}")]
    Uri(#[from] http::Error),
    /// The upstream could not be reached or failed mid-request.
    #[error("upstream request failed: {0}")]
    Upstream(#[from] hyper_util::client::legacy::Error),
}

/// A reverse proxy to one upstream.
#[derive(Debug, Clone)]
pub struct Proxy {
    client: Client<HttpConnector, Body>,
    upstream: Uri,
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// Removes hop-by-hop header fields (RFC 9110 §7.6.1), including those the
/// `Connection` field names. `Transfer-Encoding` is left to hyper, which
/// re-frames bodies itself.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for n in named {
        headers.remove(n);
    }
    for n in HOP_BY_HOP {
        headers.remove(n);
    }
}

impl Proxy {
    /// A proxy to `upstream` (an `http://host:port[/base]` URI).
    pub fn new(upstream: Uri) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Self { client, upstream }
    }

    fn target(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let base = self.upstream.path().trim_end_matches('/');
        let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
        let mut parts = self.upstream.clone().into_parts();
        parts.path_and_query = Some(format!("{base}{pq}").parse()?);
        Uri::from_parts(parts).map_err(http::Error::from)
    }

    /// Forwards a request and returns the upstream's response.
    pub async fn forward(&self, req: Request<Body>) -> Result<Response<Body>, ProxyError> {
        let (mut parts, body) = req.into_parts();
        parts.uri = self.target(&parts.uri)?;
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        let response = self
            .client
            .request(Request::from_parts(parts, body))
            .await?;
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}
