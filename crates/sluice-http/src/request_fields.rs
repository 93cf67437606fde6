//! A request's JSON body read before it is decided, when a rule reads it
//! (a settle rule's `estimate = "json:max_tokens"`, a limit's
//! `match.json`): its whole-number and boolean fields at the top level go
//! to the engine ([`BodyFields`]), and the body goes on, unchanged, to the
//! upstream or the handler.
//!
//! Bounded: at most [`MAX_BODY`] bytes are held, for at most [`MAX_WAIT`].
//! A body that is longer, slower, not an object, or has trailers is passed
//! on as it came (what was read first, then the rest), marked
//! [`BodyFields::unreadable`]: the limit's own cost is its estimate, and a
//! `match.json` condition holds. A body whose `Content-Type` is not JSON
//! is not read and has no fields (one without a `Content-Type` is read);
//! an empty body has no fields. A body that fails while
//! it is read fails the same way downstream (the proxy answers 400).
//! Requests of a policy with no such rule are not touched.
//!
//! With the tower layer outside the data plane, put
//! [`read_request_fields`] in front of it (`axum::middleware::map_request`),
//! or insert the [`BodyFields`] extension yourself.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::Request;
use http_body::{Frame, SizeHint};
use http_body_util::BodyExt;
use sluice_policy::Engine;
use sluice_policy::request_body::BodyFields;

use sluice_usage::BodyKind;

/// The most of a body held to read its fields: 1 MiB.
pub const MAX_BODY: usize = 1 << 20;

/// The longest a body is waited for.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

/// Reads `req`'s body fields into its extensions, when the policy in
/// force asks for them and the body is JSON (see the module docs); a JSON
/// body it could not read gets [`BodyFields::unreadable`].
pub async fn read_request_fields(engine: Arc<Engine>, req: Request<Body>) -> Request<Body> {
    if !has_fields_to_read(&engine, &req) {
        return req;
    }
    let (mut parts, body) = req.into_parts();
    let (body, fields) = hold(body).await;
    parts
        .extensions
        .insert(fields.unwrap_or_else(BodyFields::unreadable));
    Request::from_parts(parts, body)
}

/// Whether [`read_request_fields`] would read `req`'s body: the policy in
/// force reads request bodies, and this one is JSON (it says so, or says
/// nothing: many servers parse a body without a `Content-Type` as JSON, so
/// a client could otherwise hide a field from a rule by leaving it out).
pub fn has_fields_to_read<B>(engine: &Engine, req: &Request<B>) -> bool {
    engine.reads_request_body()
        && req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .is_none_or(|v| BodyKind::from_content_type(v.as_bytes()) == Some(BodyKind::Json))
}

/// The body again, and its fields when it was read whole in time.
async fn hold(mut body: Body) -> (Body, Option<BodyFields>) {
    let deadline = tokio::time::Instant::now() + MAX_WAIT;
    let mut read = BytesMut::new();
    loop {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Err(_) => return (replay(read, Vec::new(), Some(body)), None),
            Ok(None) => {
                let read = read.freeze();
                // No body at all has no fields, and nothing unread.
                let fields = if read.is_empty() {
                    Some(BodyFields::new())
                } else {
                    fields_of(&read)
                };
                return (Body::from(read), fields);
            }
            Ok(Some(Err(e))) => return (replay(read, vec![Err(e)], None), None),
            Ok(Some(Ok(frame))) => frame,
        };
        match frame.into_data() {
            Ok(data) => {
                read.extend_from_slice(&data);
                if read.len() > MAX_BODY {
                    return (replay(read, Vec::new(), Some(body)), None);
                }
            }
            // Trailers: the body is not read for them.
            Err(other) => return (replay(read, vec![Ok(other)], Some(body)), None),
        }
    }
}

/// A body of what was read, then `then`, then the rest.
fn replay(
    read: BytesMut,
    then: Vec<Result<Frame<Bytes>, axum::Error>>,
    rest: Option<Body>,
) -> Body {
    let mut first: VecDeque<_> = VecDeque::with_capacity(1 + then.len());
    if !read.is_empty() {
        first.push_back(Ok(Frame::data(read.freeze())));
    }
    first.extend(then);
    Body::new(Replayed { first, rest })
}

/// Frames already read, then the body they were read from.
struct Replayed {
    first: VecDeque<Result<Frame<Bytes>, axum::Error>>,
    rest: Option<Body>,
}

impl http_body::Body for Replayed {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        if let Some(frame) = this.first.pop_front() {
            return Poll::Ready(Some(frame));
        }
        match &mut this.rest {
            Some(rest) => Pin::new(rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_empty() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let held: u64 = self
            .first
            .iter()
            .filter_map(|f| f.as_ref().ok()?.data_ref().map(|d| d.len() as u64))
            .sum();
        let mut hint = self
            .rest
            .as_ref()
            .map_or(SizeHint::with_exact(0), |r| r.size_hint());
        hint.set_lower(hint.lower().saturating_add(held));
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

/// The whole-number and boolean fields at the top level of a JSON object;
/// `None` when `json` is not one (see [`sluice_usage::top_level_scalars`]).
pub fn fields_of(json: &[u8]) -> Option<BodyFields> {
    let mut fields = BodyFields::new();
    let object = sluice_usage::top_level_scalars(json, |name, v| match v {
        sluice_usage::Scalar::Whole(n) => fields.push_whole(name, n),
        sluice_usage::Scalar::Bool(b) => fields.push_bool(name, b),
    });
    object.then_some(fields)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_top_level_whole_numbers_and_booleans_are_read() {
        let n = fields_of(
            br#"{"model":"m","max_tokens":512,"messages":[{"max_tokens":9}],
                "temperature":0.5,"n":-1,"nested":{"x":1,"stream":false},"stream":true,"big":1e3}"#,
        )
        .unwrap();
        assert_eq!(n.whole("max_tokens"), Some(512));
        assert_eq!(n.bool("stream"), Some(true));
        assert_eq!(n.len(), 2, "{n:?}");
        assert_eq!(fields_of(b"[1,2]"), None);
        assert_eq!(fields_of(b"{\"max_tokens\": 5"), None, "cut short");
        assert_eq!(fields_of(b"{\"a\":1} {}"), None, "two documents");
        assert_eq!(
            fields_of(b"{\"max\\u005ftokens\":7}")
                .unwrap()
                .whole("max_tokens"),
            Some(7),
            "an escaped name"
        );
    }

    #[tokio::test]
    async fn an_empty_body_has_no_fields_and_is_not_unreadable() {
        let (body, fields) = hold(Body::empty()).await;
        assert_eq!(fields, Some(BodyFields::new()));
        assert!(body.collect().await.unwrap().to_bytes().is_empty());
        let (_, fields) = hold(Body::from("[true]")).await;
        assert_eq!(fields, None, "not an object: unreadable");
    }

    #[tokio::test]
    async fn a_body_read_whole_goes_on_unchanged() {
        let (body, numbers) = hold(Body::from("{\"max_tokens\":40}")).await;
        assert_eq!(numbers.unwrap().whole("max_tokens"), Some(40));
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"{\"max_tokens\":40}");
    }

    #[tokio::test]
    async fn a_body_too_long_goes_on_whole_and_unread() {
        let long = format!("{{\"max_tokens\":1,\"pad\":\"{}\"}}", "x".repeat(MAX_BODY));
        let chunks: Vec<Result<Bytes, std::io::Error>> = long
            .as_bytes()
            .chunks(64 * 1024)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let body = Body::from_stream(futures_util::stream::iter(chunks));
        let (body, numbers) = hold(body).await;
        assert!(numbers.is_none(), "not read past the bound");
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(bytes.len(), long.len());
        assert_eq!(&bytes[..], long.as_bytes());
    }
}
