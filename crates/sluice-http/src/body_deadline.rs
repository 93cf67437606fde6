//! A deadline on a whole request body, so that a client cannot hold a
//! request (and its connection, and its place under the listener's cap)
//! by sending its body a byte at a time.
//!
//! The listener wraps each request's body in a [`Deadline`] from the end
//! of its head (`body_timeout`, `control_body_timeout`). Bytes that have
//! arrived are always read; once the deadline has passed, the next read
//! that would wait fails with [`BodyTimeout`] instead, and the handler
//! reading the body fails with it. The listener then answers
//! [`timed_out`] (`408`, `Connection: close`) in place of whatever the
//! handler answered, if no answer has been sent yet, and the connection
//! closes. A body nobody reads costs nothing: the timer is armed only when
//! a read has to wait.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::problem::Problem;

/// A request body that did not arrive in time.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the request body did not arrive within {0:?}")]
pub struct BodyTimeout(pub Duration);

/// Whether a request's body ran out of time (shared by its [`Deadline`]
/// and the listener, which answers for it).
#[derive(Debug, Default)]
pub struct Overdue(AtomicBool);

impl Overdue {
    /// Whether the body ran out of time.
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

pin_project! {
    /// A request body that must arrive by a deadline.
    #[derive(Debug)]
    pub struct Deadline<B> {
        #[pin]
        body: B,
        at: Instant,
        timeout: Duration,
        // Armed on the first read that has to wait.
        #[pin]
        sleep: Option<Sleep>,
        expired: Arc<Overdue>,
    }
}

impl<B> Deadline<B> {
    /// `body`, which must arrive within `timeout` from now; `expired` is
    /// set if it does not.
    pub fn new(body: B, timeout: Duration, expired: Arc<Overdue>) -> Self {
        Self {
            body,
            at: Instant::now() + timeout,
            timeout,
            sleep: None,
            expired,
        }
    }
}

impl<B> http_body::Body for Deadline<B>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::BoxError>>> {
        let mut this = self.project();
        if !this.expired.get()
            && let Poll::Ready(frame) = this.body.poll_frame(cx)
        {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        if this.sleep.is_none() {
            this.sleep.set(Some(tokio::time::sleep_until(*this.at)));
        }
        let Some(sleep) = this.sleep.as_pin_mut() else {
            return Poll::Pending;
        };
        match std::future::Future::poll(sleep, cx) {
            Poll::Ready(()) => {
                this.expired.0.store(true, Ordering::Relaxed);
                Poll::Ready(Some(Err(BodyTimeout(*this.timeout).into())))
            }
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        !self.expired.get() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The answer to a request whose body did not arrive in time: `408`, and
/// (over HTTP/1) `Connection: close`, since the rest of the body would
/// otherwise be read as the next request.
pub fn timed_out(http1: bool) -> Response<Body> {
    let mut response = Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        "The request body did not arrive in time.",
    )
    .into_response();
    if http1 {
        response
            .headers_mut()
            .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// A body whose next bytes never come.
    struct Stalled;

    impl http_body::Body for Stalled {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_stalled_body_fails_at_its_deadline_and_an_arrived_one_is_read() {
        let overdue = Arc::new(Overdue::default());
        // Bytes that have arrived are read, even past the deadline.
        let arrived = http_body_util::Full::new(Bytes::from_static(b"abc"));
        let read = Deadline::new(arrived, Duration::ZERO, overdue.clone())
            .collect()
            .await
            .unwrap();
        assert_eq!(read.to_bytes(), "abc");
        assert!(!overdue.get());
        let stalled = Deadline::new(Stalled, Duration::from_millis(20), overdue.clone());
        let e = stalled.collect().await.unwrap_err();
        assert!(e.to_string().contains("did not arrive within"), "{e}");
        assert!(overdue.get());
        let answer = timed_out(true);
        assert_eq!(answer.status(), StatusCode::REQUEST_TIMEOUT);
        assert_eq!(answer.headers()[http::header::CONNECTION], "close");
        assert!(
            !timed_out(false)
                .headers()
                .contains_key(http::header::CONNECTION)
        );
    }
}
