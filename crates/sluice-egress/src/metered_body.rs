//! An answer's body that settles its call's tokens when it ends, from the
//! `usage` it reports.

use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use sluice_usage::{Limits, UsageScan};

use crate::permit::Permit;

pin_project! {
    /// The body of an answer to a call that counts tokens: it passes every
    /// frame on unchanged, reads the `usage` of a JSON body or event stream
    /// as it passes (a bounded scan: the body is never held, see
    /// [`sluice_usage`]), and when the body ends settles the call's tokens
    /// at the usage's `total_tokens`. A body that reports no usage, is not
    /// JSON or an event stream, or is dropped before its end leaves the
    /// call's estimate. The body ends at its last frame (`is_end_stream`)
    /// or at the `None` after it, whichever a reader polls. For a call that counts no tokens it only passes
    /// the frames on.
    #[derive(Debug)]
    pub struct MeteredBody<B> {
        #[pin]
        inner: B,
        metering: Option<(UsageScan, Permit)>,
    }
}

impl<B> MeteredBody<B> {
    /// `inner`, metered for `permit` when the answer's `Content-Type`
    /// (`content_type`) is one that carries a usage.
    pub fn new(inner: B, permit: Permit, content_type: Option<&[u8]>) -> Self {
        let scan = content_type
            .filter(|_| permit.counts_tokens())
            .and_then(|value| UsageScan::for_content_type(value, Limits::default()));
        Self {
            inner,
            metering: scan.map(|scan| (scan, permit)),
        }
    }
}

impl<B: Body> Body for MeteredBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let mut this = self.project();
        let frame = std::task::ready!(this.inner.as_mut().poll_frame(cx));
        match &frame {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    feed(this.metering, data);
                }
                // A reader may stop at the end of the stream, without
                // polling for the `None` after the last frame.
                if this.inner.is_end_stream() {
                    settle(this.metering);
                }
            }
            // The whole body went by: settle at what it reported.
            None => settle(this.metering),
            // A body that failed part way keeps the estimate.
            Some(Err(_)) => drop(this.metering.take()),
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Settles the call at the usage the body reported, once; with none, the
/// estimate stands.
fn settle(metering: &mut Option<(UsageScan, Permit)>) {
    if let Some((scan, permit)) = metering.take()
        && let Some(usage) = scan.finish()
    {
        permit.settle_later(usage.total_tokens);
    }
}

/// Feeds a frame's bytes to the scan, without consuming them. A frame
/// whose buffer shows its bytes in more pieces than are looked at is not
/// read: the scan is given up, and the call keeps its estimate.
fn feed(metering: &mut Option<(UsageScan, Permit)>, data: &impl Buf) {
    let Some((scan, _)) = metering.as_mut() else {
        return;
    };
    let mut slices = [IoSlice::new(&[]); 16];
    let n = data.chunks_vectored(&mut slices);
    let seen: usize = slices[..n].iter().map(|s| s.len()).sum();
    if seen != data.remaining() {
        tracing::debug!("egress: a frame in too many pieces to scan; the call keeps its estimate");
        *metering = None;
        return;
    }
    for slice in &slices[..n] {
        scan.feed(slice);
    }
}
