//! The path of a request that waits before the inner service is called:
//! decided on a store over the network, or on a policy that settles costs
//! after the response (whose reservation it keeps), then forwarded.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use http::{Request, Response};
use sluice_policy::Reservation;
use tower_service::Service;

use super::{BoxError, Shared, refused, request_info};
use crate::headers::Fields;
use crate::settling_body::{SettlingBody, Unsettled};

/// Decides `req` (waiting on the store), then forwards it to `inner` or
/// answers its refusal. A request whose limits settle after the response
/// gets a body that settles them when it ends.
pub(super) async fn decide_then_forward<S, ReqBody, ResBody>(
    shared: Arc<Shared>,
    inner: S,
    mut req: Request<ReqBody>,
    peer: Option<IpAddr>,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    let (decided, reservation) = match shared
        .engine
        .decide_reserving(&request_info(&req, peer, &shared.engine))
        .await
    {
        Ok((v, r)) => (Ok(v), r),
        Err(e) => (Err(e), None),
    };
    // Settled however the request ends from here: by its response's
    // body, or with nothing observed if it never gets one (a rate
    // limit's estimate stands, a concurrency slot is given back).
    let reservation = reservation.map(|r| {
        if let Some(m) = &shared.metrics {
            m.record_reserved(&r);
        }
        Unsettled::new(shared.engine.clone(), shared.metrics.clone(), r)
    });
    if let Some(m) = &shared.metrics {
        m.record_result(&decided);
    }
    match decided {
        Ok(v) if v.allowed => {
            let (fields, delay) = (Fields::of(&v), v.delay());
            if shared.verdict {
                req.extensions_mut().insert(v);
            }
            if reservation
                .as_ref()
                .and_then(Unsettled::reservation)
                .is_some_and(Reservation::reads_usage)
            {
                // The usage is read from the body as it passes: it
                // must come uncompressed.
                req.headers_mut().insert(
                    http::header::ACCEPT_ENCODING,
                    http::HeaderValue::from_static("identity"),
                );
            }
            let response = forward(inner, req, fields, delay).await?;
            Ok(match reservation {
                Some(r) => SettlingBody::wrap(response, r),
                None => response,
            })
        }
        other => Ok(refused(&other)),
    }
}

/// Holds the request for the verdict's delay (a leaky bucket's smoothing,
/// or an `on_limit = "delay"` limit's wait: an async sleep, no thread
/// held), calls the inner service, and adds the rate-limit fields to its
/// response.
pub(super) async fn forward<S, ReqBody, ResBody>(
    mut inner: S,
    req: Request<ReqBody>,
    fields: Option<Fields>,
    delay: u64,
) -> Result<Response<Body>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    ResBody: http_body::Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    if delay > 0 {
        tokio::time::sleep(Duration::from_nanos(delay)).await;
    }
    let mut response = inner.call(req).await?.map(Body::new);
    if let Some(fields) = fields {
        fields.apply(response.headers_mut());
    }
    Ok(response)
}
