//! A `reqwest::Client` that respects an [`EgressLimiter`].

use std::sync::Arc;
use std::time::Duration;

use crate::limiter::{EgressError, EgressLimiter};
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
    pub async fn execute(
        &self,
        request: reqwest::Request,
    ) -> Result<reqwest::Response, EgressError> {
        let target = request.url().host_str().unwrap_or_default().to_owned();
        self.limiter.acquire(&target, self.deadline).await?;
        let response = self.client.execute(request).await?;
        if let Some(pause) = requested_pause(response.status(), response.headers()) {
            self.limiter.pause(&target, pause);
        }
        Ok(response)
    }

    /// `GET url`.
    pub async fn get(&self, url: &str) -> Result<reqwest::Response, EgressError> {
        let request = self.client.get(url).build()?;
        self.execute(request).await
    }
}
