//! A `reqwest::Client` that respects an [`EgressLimiter`].

use std::sync::Arc;
use std::time::Duration;

use reqwest::ResponseBuilderExt;

use crate::limiter::{EgressError, EgressLimiter};
use crate::metered_body::MeteredBody;
use crate::permit::Permit;
use crate::tokens::body_estimate;
use crate::upstream_signals::requested_pause;

/// Sends requests through `reqwest` once the target's quota allows.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::{sync::Arc, time::Duration};
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_egress::{EgressLimiter, RateLimitedClient};
///
/// // The partner allows 10 calls a second.
/// let spec = LimitSpec { algorithm: AlgorithmKind::Gcra, rate: Rate::per_second(10), burst: 10, nodelay: true };
/// let client = RateLimitedClient::new(
///     reqwest::Client::new(),
///     Arc::new(EgressLimiter::new(&spec)?),
///     Duration::from_secs(5),
/// );
/// let response = client.get("https://partner.example/v1/items").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RateLimitedClient {
    client: reqwest::Client,
    limiter: Arc<EgressLimiter>,
    deadline: Duration,
}

impl RateLimitedClient {
    /// Wraps `client`; each call waits at most `deadline` for quota.
    pub fn new(client: reqwest::Client, limiter: Arc<EgressLimiter>, deadline: Duration) -> Self {
        Self {
            client,
            limiter,
            deadline,
        }
    }

    /// Sends a request once its host's quota allows, and pauses the host if
    /// the answer asks to wait.
    ///
    /// Where the host has a [`TokenQuota`](crate::TokenQuota), the call
    /// reserves the tokens its JSON body asks for at most
    /// (`max_completion_tokens`, else `max_tokens`; else the quota's
    /// estimate), and the answer's body settles them as it is read, at the
    /// usage it reports (see [`MeteredBody`]).
    pub async fn execute(
        &self,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, EgressError> {
        let target = request.url().host_str().unwrap_or_default().to_owned();
        let estimate = request
            .body()
            .and_then(reqwest::Body::as_bytes)
            .and_then(body_estimate);
        let permit = self
            .limiter
            .acquire(&target, estimate, self.deadline)
            .await?;
        let response = self.client.execute(request).await?;
        if let Some(pause) = requested_pause(response.status(), response.headers()) {
            self.limiter.pause(&target, pause);
        }
        Ok(metered(response, permit))
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Result<reqwest::Response, EgressError> {
        let request = self.client.get(url).build()?;
        self.execute(request).await
    }
}

/// The response, its body metered for `permit` where the call counts
/// tokens.
fn metered(response: reqwest::Response, permit: Permit) -> reqwest::Response {
    if !permit.counts_tokens() {
        return response;
    }
    let url = response.url().clone();
    let (parts, body) = http::Response::from(response).into_parts();
    let content_type = parts.headers.get(http::header::CONTENT_TYPE).cloned();
    let body = MeteredBody::new(body, permit, content_type.as_ref().map(|v| v.as_bytes()));
    let mut rebuilt = http::Response::from_parts(parts, reqwest::Body::wrap(body));
    // `reqwest` keeps a response's URL in an extension that only its
    // builder sets.
    if let Ok(with_url) = http::Response::builder().url(url).body(()) {
        rebuilt
            .extensions_mut()
            .extend(with_url.into_parts().0.extensions);
    }
    reqwest::Response::from(rebuilt)
}
