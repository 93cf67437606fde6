//! A body that holds something (a place under a cap, a request's
//! in-flight mark) until it has been sent or dropped.

use std::pin::Pin;
use std::task::{Context, Poll};

use pin_project_lite::pin_project;

pin_project! {
    /// `body`, holding `guard` until it is dropped.
    #[derive(Debug)]
    pub struct Guarded<B, G> {
        #[pin]
        body: B,
        guard: G,
    }
}

impl<B, G> Guarded<B, G> {
    /// `body`, holding `guard`.
    pub fn new(body: B, guard: G) -> Self {
        Self { body, guard }
    }
}

impl<B: http_body::Body, G> http_body::Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
