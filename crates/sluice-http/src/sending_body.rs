//! A response body that keeps its request in flight until it is sent, and
//! tells the connection's watchdog when a frame it handed over waits on
//! the client (see [`conn_activity`](crate::conn_activity)).

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use pin_project_lite::pin_project;

use crate::conn_activity::InFlight;

pin_project! {
    /// `body`, holding its request's [`InFlight`] mark until it is dropped.
    pub struct SendingBody {
        #[pin]
        body: Body,
        guard: Option<InFlight>,
    }
}

impl SendingBody {
    /// `body`, holding `guard`.
    pub fn new(body: Body, guard: Option<InFlight>) -> Self {
        Self { body, guard }
    }
}

impl http_body::Body for SendingBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        // Asked for the next frame: the last one has been taken. Waiting on
        // the body (an upstream's next chunk) is not waiting on the client.
        if let Some(guard) = this.guard.as_mut() {
            guard.taken();
        }
        let polled = this.body.poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &polled
            && let Some(guard) = this.guard.as_mut()
        {
            guard.handed();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
