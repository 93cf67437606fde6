//! The tower layer for outbound `http` requests (hyper clients and others).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::limiter::EgressLimiter;
use crate::metered_body::MeteredBody;
use crate::tokens::TokenEstimate;
use crate::upstream_signals::requested_pause;

/// Errors of an [`EgressService`]: the limiter's or the inner service's.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Makes every request wait for its host's quota (up to `deadline`).
/// Where the host has a [`TokenQuota`](crate::TokenQuota), a request
/// reserves its [`TokenEstimate`] (an extension; else the quota's
/// estimate), and its answer's body is a [`MeteredBody`] that settles the
/// tokens at the usage the answer reports.
#[derive(Debug, Clone)]
pub struct EgressLayer {
    limiter: Arc<EgressLimiter>,
    deadline: Duration,
}

impl EgressLayer {
    /// A layer over a shared limiter.
    pub fn new(limiter: Arc<EgressLimiter>, deadline: Duration) -> Self {
        Self { limiter, deadline }
    }
}

impl<S> Layer<S> for EgressLayer {
    type Service = EgressService<S>;

    fn layer(&self, inner: S) -> EgressService<S> {
        EgressService {
            inner,
            limiter: self.limiter.clone(),
            deadline: self.deadline,
        }
    }
}

/// The service [`EgressLayer`] wraps around a client.
#[derive(Debug, Clone)]
pub struct EgressService<S> {
    inner: S,
    limiter: Arc<EgressLimiter>,
    deadline: Duration,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for EgressService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ReqBody: Send + 'static,
{
    type Response = Response<MeteredBody<ResBody>>;
    type Error = BoxError;
    type Future =
        Pin<Box<dyn Future<Output = Result<Response<MeteredBody<ResBody>>, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let limiter = self.limiter.clone();
        let deadline = self.deadline;
        Box::pin(async move {
            let target = req.uri().host().unwrap_or_default().to_owned();
            let estimate = req.extensions().get::<TokenEstimate>().map(|e| e.0);
            let permit = limiter.acquire(&target, estimate, deadline).await?;
            let response = inner.call(req).await.map_err(Into::into)?;
            if let Some(pause) = requested_pause(response.status(), response.headers()) {
                limiter.pause(&target, pause);
            }
            let content_type = response.headers().get(http::header::CONTENT_TYPE).cloned();
            Ok(response.map(|body| {
                MeteredBody::new(body, permit, content_type.as_ref().map(|v| v.as_bytes()))
            }))
        })
    }
}
