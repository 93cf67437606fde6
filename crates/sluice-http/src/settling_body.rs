//! A response body that settles its request's [`Reservation`] when it
//! ends: after its last frame, or when it is dropped before (the client
//! went away, the upstream failed). What it saw goes to
//! [`Engine::settle`]: the status, the header fields and trailers, the
//! bytes sent, the cost the application reported ([`ActualCost`]), and
//! where a rule reads it, the `usage` of a JSON or event-stream body (a
//! bounded [scan](sluice_usage) of the frames as they pass; the body is
//! never held). A rule whose source said nothing (no usage in the stream,
//! a stream cut short, a compressed body) settles at its estimate.
//!
//! The settlement runs once: at once on a store in this process, else in a
//! task of its own on the tokio runtime, never holding up the response.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Response};
use pin_project_lite::pin_project;
use sluice_policy::settlement::{Observed, TokenUsage};
use sluice_policy::{Engine, Reservation};

use crate::metrics::Metrics;
use sluice_usage::{Limits, UsageScan};

/// The actual cost of a request, reported by the application (the inner
/// service of the [tower layer](crate::layer)) as a response extension, for
/// limits whose rule reads `"reported"`.
///
/// ```
/// let mut response = http::Response::new(());
/// response.extensions_mut().insert(sluice_http::settling_body::ActualCost(1234));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActualCost(pub u64);

/// A request's reservation, from its admission to its settlement: dropped
/// before a response came (the client went away, the inner service
/// failed), it settles with nothing observed (a rate limit's estimate
/// stands; a concurrency slot is given back). A response takes it over
/// ([`SettlingBody::wrap`]).
pub struct Unsettled {
    engine: Arc<Engine>,
    metrics: Option<Arc<Metrics>>,
    reservation: Option<Reservation>,
    /// The task renewing its concurrency slots' leases, on a store that
    /// keeps leases: stopped when the reservation is settled.
    renewal: Option<tokio::task::AbortHandle>,
}

impl Unsettled {
    /// `reservation`, to be settled on `engine` (and recorded in
    /// `metrics`).
    pub fn new(
        engine: Arc<Engine>,
        metrics: Option<Arc<Metrics>>,
        reservation: Reservation,
    ) -> Self {
        let renewal = renewal(&engine, &reservation);
        Self {
            engine,
            metrics,
            reservation: Some(reservation),
            renewal,
        }
    }

    /// The reservation.
    pub fn reservation(&self) -> Option<&Reservation> {
        self.reservation.as_ref()
    }
}

/// On a store that keeps leases (one over the network), a task that renews
/// the reservation's concurrency slots every third of their lease until it
/// is stopped; none for a store in this process, whose slots need none, or
/// outside a tokio runtime.
fn renewal(engine: &Arc<Engine>, reservation: &Reservation) -> Option<tokio::task::AbortHandle> {
    let lease = reservation.lease()?;
    if engine.store().answers_at_once() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    let every =
        std::time::Duration::from_nanos(lease / 3).max(std::time::Duration::from_millis(100));
    let (engine, reservation) = (engine.clone(), reservation.clone());
    let task = runtime.spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            engine.renew(&reservation).await;
        }
    });
    Some(task.abort_handle())
}

impl Drop for Unsettled {
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            let pending = Pending {
                engine: self.engine.clone(),
                metrics: self.metrics.take(),
                reservation,
                status: None,
                headers: HeaderMap::new(),
                reported: None,
                renewal: self.renewal.take(),
            };
            settle(Some(Box::new(pending)), &mut Seen::default());
        }
    }
}

/// What a settlement needs, taken once.
struct Pending {
    engine: Arc<Engine>,
    metrics: Option<Arc<Metrics>>,
    reservation: Reservation,
    status: Option<u16>,
    headers: HeaderMap,
    reported: Option<u64>,
    renewal: Option<tokio::task::AbortHandle>,
}

pin_project! {
    /// `body`, settling its request's reservation when it ends.
    pub struct SettlingBody {
        #[pin]
        body: Body,
        pending: Option<Box<Pending>>,
        seen: Seen,
    }

    impl PinnedDrop for SettlingBody {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            settle(this.pending.take(), this.seen);
        }
    }
}

/// What a body saw of itself as it went.
#[derive(Default)]
struct Seen {
    sent: u64,
    trailers: Option<HeaderMap>,
    /// The usage scan, when a rule reads it and the body can be read.
    usage: Option<Box<UsageScan>>,
}

impl Seen {
    fn taken(&mut self) -> Self {
        std::mem::take(self)
    }
}

impl SettlingBody {
    /// The response, its body settling the reservation when it ends.
    pub fn wrap(response: Response<Body>, mut unsettled: Unsettled) -> Response<Body> {
        let Some(reservation) = unsettled.reservation.take() else {
            return response;
        };
        let (parts, body) = response.into_parts();
        let reservation_reads_fields = reservation.reads_fields();
        let usage = reservation
            .reads_usage()
            .then(|| usage_scan(&parts.headers))
            .flatten()
            .map(Box::new);
        let pending = Pending {
            engine: unsettled.engine.clone(),
            metrics: unsettled.metrics.take(),
            reservation,
            status: Some(parts.status.as_u16()),
            // Kept only for a rule that reads them: a copy per response
            // otherwise costs for nothing.
            headers: if reservation_reads_fields {
                parts.headers.clone()
            } else {
                HeaderMap::new()
            },
            reported: parts.extensions.get::<ActualCost>().map(|c| c.0),
            renewal: unsettled.renewal.take(),
        };
        let body = Self {
            body,
            pending: Some(Box::new(pending)),
            seen: Seen {
                usage,
                ..Seen::default()
            },
        };
        Response::from_parts(parts, Body::new(body))
    }
}

impl http_body::Body for SettlingBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                let seen = this.seen;
                if let Some(data) = frame.data_ref() {
                    seen.sent = seen.sent.saturating_add(data.len() as u64);
                    if let Some(scan) = seen.usage.as_mut() {
                        scan.feed(data);
                    }
                } else if let Some(t) = frame.trailers_ref() {
                    seen.trailers = Some(t.clone());
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => {
                settle(this.pending.take(), this.seen);
            }
            Poll::Pending => {}
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

/// A scan for the usage of a response with these header fields: `None`
/// for a body that is neither JSON nor an event stream, or that is encoded
/// (compressed): its usage cannot be read, and the estimate stands.
fn usage_scan(headers: &HeaderMap) -> Option<UsageScan> {
    let encoded = headers
        .get(http::header::CONTENT_ENCODING)
        .is_some_and(|e| !e.as_bytes().eq_ignore_ascii_case(b"identity"));
    if encoded {
        return None;
    }
    let kind = headers.get(http::header::CONTENT_TYPE)?;
    UsageScan::for_content_type(kind.as_bytes(), Limits::default())
}

/// Settles, in a task of its own, what a body saw; nothing when it settled
/// already. Outside a tokio runtime (a body dropped by a caller that has
/// none) the reservation stands at its estimate, and a warning says so.
fn settle(pending: Option<Box<Pending>>, seen: &mut Seen) {
    let Some(p) = pending else {
        return;
    };
    if let Some(renewal) = &p.renewal {
        renewal.abort();
    }
    let seen = seen.taken();
    let mut work = Box::pin(async move {
        let usage = seen
            .usage
            .and_then(|scan| scan.finish())
            .map(|u| TokenUsage {
                prompt: u.prompt_tokens,
                completion: u.completion_tokens,
                total: u.total_tokens,
            });
        let observed = Observed {
            status: p.status,
            headers: Some(&p.headers),
            trailers: seen.trailers.as_ref(),
            body_bytes: Some(seen.sent),
            usage,
            reported: p.reported,
        };
        let settled = p.engine.settle(&p.reservation, &observed).await;
        if let Some(m) = &p.metrics {
            m.record_settled(&settled);
        }
    });
    // A store in this process settles at once, here; one over the network
    // goes on in a task of its own, never holding up the response.
    let mut cx = Context::from_waker(std::task::Waker::noop());
    if work.as_mut().poll(&mut cx).is_ready() {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(work);
        }
        Err(_) => tracing::warn!(
            "a response ended outside a tokio runtime: its reservation stands at its estimate"
        ),
    }
}
