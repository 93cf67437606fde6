//! The reverse proxy to the upstream.
//!
//! An admitted request is forwarded with its method, (canonical) path,
//! query, headers (less hop-by-hop ones, and with the forwarding fields
//! Sluice writes: see [`forwarding_fields`](crate::forwarding_fields)) and
//! body, streamed; the upstream's answer streams back. What can go wrong, and what the client gets (see
//! [`ProxyError`]):
//!
//! - the upstream refuses the connection, or fails mid-request: 502;
//! - connecting takes longer than `upstream_connect_timeout`, or the
//!   response head longer than `upstream_response_timeout` after the
//!   request was sent (its body included): 504;
//! - `upstream_max_in_flight` requests are already waiting on the
//!   upstream or streaming its answers: 503 at once, with `Retry-After`;
//! - the client's own body is malformed (a broken chunked encoding, a
//!   body shorter than its `Content-Length`): 400.

use std::sync::{Arc, LazyLock};

use axum::body::Body;
use http::header::{CONNECTION, HOST, HeaderName};
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Request, Response, Uri};
use sluice_policy::server_settings::UpstreamSettings;
use tokio::sync::Semaphore;

use crate::guarded_body::Guarded;
use crate::name_set::NameSet;
use crate::upstream::{Returning, Upstream, UpstreamError};

/// Why a request could not be forwarded.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The upstream URI could not be built.
    #[error("cannot build the upstream URI: {0}")]
    Uri(#[from] http::Error),
    /// The upstream could not be reached or failed mid-request.
    #[error("upstream request failed: {0}")]
    Upstream(#[from] UpstreamError),
    /// The upstream took too long to accept the connection or to answer.
    #[error("the upstream did not answer in time")]
    Timeout,
    /// Too many requests are in flight to the upstream already.
    #[error("too many requests are in flight to the upstream")]
    Busy,
    /// The client's request body is malformed.
    #[error("the request body is malformed: {0}")]
    BadBody(String),
}

/// A reverse proxy to one upstream.
#[derive(Debug, Clone)]
pub struct Proxy {
    upstream: Arc<Upstream>,
    /// The upstream's path, without its trailing `/`: each request's path
    /// is appended to it.
    base: Box<str>,
    /// The upstream's authority, for a request that has no `Host`.
    host: HeaderValue,
    settings: UpstreamSettings,
    in_flight: Arc<Semaphore>,
    trusts: Trusts,
}

/// Whether a peer is a trusted proxy (read from the policy in force).
#[derive(Clone)]
pub struct Trusts(pub Arc<dyn Fn(std::net::IpAddr) -> bool + Send + Sync>);

impl std::fmt::Debug for Trusts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Trusts(..)")
    }
}

/// Names, not text: a map looks a name up as it is, where text is parsed
/// into a name at every call (twice a request through the proxy: the
/// request's fields at the edge, the response's here).
static HOP_BY_HOP: LazyLock<NameSet> = LazyLock::new(|| {
    NameSet::new([
        CONNECTION,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
        http::header::PROXY_AUTHENTICATE,
        http::header::PROXY_AUTHORIZATION,
        http::header::TE,
        http::header::TRAILER,
        http::header::UPGRADE,
    ])
});

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
    HOP_BY_HOP.remove_from(headers);
}

impl Proxy {
    /// A proxy to `upstream` (an `http://host:port[/base]` URI), with its
    /// timeouts and in-flight cap.
    pub fn new(upstream: Uri, settings: UpstreamSettings) -> Self {
        let host = upstream
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            .unwrap_or_else(|| HeaderValue::from_static("localhost"));
        Self {
            upstream: Arc::new(Upstream::new(
                &upstream,
                settings.connect_timeout,
                settings.max_in_flight,
            )),
            base: upstream.path().trim_end_matches('/').into(),
            host,
            settings,
            in_flight: Arc::new(Semaphore::new(settings.max_in_flight)),
            trusts: Trusts(Arc::new(|_| false)),
        }
    }

    /// Tells trusted proxies apart by `trusts`: their forwarding fields are
    /// kept and extended; every other peer's are replaced.
    pub fn with_trusts(mut self, trusts: Trusts) -> Self {
        self.trusts = trusts;
        self
    }

    /// The request's target on the upstream, in origin form: the base path
    /// and the request's path and query.
    fn target(&self, uri: Uri) -> Result<Uri, http::Error> {
        if self.base.is_empty() {
            if uri.scheme().is_none() && uri.authority().is_none() {
                return Ok(uri);
            }
            let pq = uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            return Ok(Uri::from(pq));
        }
        let pq = uri.path_and_query().map_or("/", |pq| pq.as_str());
        Ok(format!("{}{pq}", self.base).parse()?)
    }

    /// Forwards a request and returns the upstream's response, whose body
    /// holds a place under the in-flight cap until it has streamed.
    ///
    /// The request's hop-by-hop fields are already gone: the data plane's
    /// edge ([`Edge`](crate::edge::Edge)) strips them before any limit sees
    /// the request, so that no limit counts a field the upstream would not
    /// get. (Within the crate, so that no other caller skips that.)
    pub(crate) async fn forward(&self, req: Request<Body>) -> Result<Response<Body>, ProxyError> {
        let permit = self
            .in_flight
            .clone()
            .try_acquire_owned()
            .map_err(|_| ProxyError::Busy)?;
        let (mut parts, body) = req.into_parts();
        parts.uri = self.target(std::mem::take(&mut parts.uri))?;
        parts.version = http::Version::HTTP_11;
        // Room for the fields written below (`TE`, `Host`, three forwarding
        // fields) at once: hyper sizes a request's map to the fields it
        // came with, and each growth moves them all.
        parts.headers.reserve(5);
        if !parts.headers.contains_key(HOST) {
            parts.headers.insert(HOST, self.host.clone());
        }
        // The proxy takes trailers (a limit may settle from one): an
        // HTTP/1.1 upstream sends them only to a request that says so
        // (RFC 9110 §10.1.4).
        parts
            .headers
            .insert(http::header::TE, http::HeaderValue::from_static("trailers"));
        if let Some(axum::extract::ConnectInfo(peer)) = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        {
            let peer = peer.ip();
            crate::forwarding_fields::write(&mut parts.headers, peer, (self.trusts.0)(peer));
        }
        let sent = self.upstream.send(Request::from_parts(parts, body));
        let (response, lease) =
            match tokio::time::timeout(self.settings.response_timeout, sent).await {
                Err(_) | Ok(Err(UpstreamError::ConnectTimeout)) => {
                    return Err(ProxyError::Timeout);
                }
                Ok(Err(e)) if the_clients_body_failed(&e) => {
                    return Err(ProxyError::BadBody(source_text(&e)));
                }
                Ok(r) => r?,
            };
        let (mut parts, body) = response.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(
            parts,
            Body::new(Guarded::new(Returning::new(body, lease), permit)),
        ))
    }
}

/// Whether sending failed because the client's body did (a malformed
/// body is the client's fault, not the upstream's): the body's own error,
/// an `axum::Error`, is among the causes.
fn the_clients_body_failed(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(e);
    while let Some(e) = source {
        if e.is::<axum::Error>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The innermost cause of an error, as text.
fn source_text(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    inner.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hop_by_hop_field_goes_and_the_others_stay() {
        let mut h = HeaderMap::new();
        for (name, value) in [
            ("Keep-Alive", "timeout=5"),
            ("te", "trailers"),
            ("TE", "gzip"),
            ("x-api-key", "k"),
            ("connection", "x-named"),
            ("x-named", "1"),
            ("upgrade", "h2c"),
            ("Proxy-Authorization", "Basic eA=="),
        ] {
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            h.append(name, value.parse().unwrap());
        }
        strip_hop_by_hop(&mut h);
        let left: Vec<&str> = h.keys().map(HeaderName::as_str).collect();
        assert_eq!(left, ["x-api-key"]);
    }
}
