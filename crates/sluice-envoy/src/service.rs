//! The gRPC server: `envoy.service.ratelimit.v3.RateLimitService` and
//! `grpc.health.v1`, with bounded messages and keepalives. Each call is
//! answered by [`EnvoyRls::decide`].

use std::future::Future;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::answer::EnvoyRls;
use crate::request::MAX_MESSAGE_BYTES;
use crate::tls::ServerTls;

/// How often the server pings an HTTP/2 connection, to find dead peers.
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long the server waits for a ping's answer before it closes the
/// connection.
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most calls one HTTP/2 connection may have in flight at once (each
/// holds a decision, which may wait on the store). Envoy keeps far fewer
/// open per connection.
pub const MAX_CONCURRENT_STREAMS: u32 = 256;

/// How long an accepted TCP connection stays idle before the kernel sends
/// keepalive probes.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

#[tonic::async_trait]
impl RateLimitService for EnvoyRls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.decide(request.get_ref()).await {
            Ok(response) => Ok(Response::new(response)),
            Err(e) => {
                tracing::debug!(error = %e, "ShouldRateLimit refused: invalid request");
                Err(e.into())
            }
        }
    }
}

/// Sets the Rate Limit Service's health status.
async fn report(reporter: &tonic_health::server::HealthReporter, serving: bool) {
    if serving {
        reporter
            .set_serving::<RateLimitServiceServer<EnvoyRls>>()
            .await;
    } else {
        reporter
            .set_not_serving::<RateLimitServiceServer<EnvoyRls>>()
            .await;
    }
}

/// Serves the Rate Limit Service and `grpc.health.v1` on `listener` until
/// `shutdown` completes, over TLS with `tls`: messages of at most
/// [`MAX_MESSAGE_BYTES`], at most [`MAX_CONCURRENT_STREAMS`] calls in
/// flight per connection, HTTP/2 pings every [`HTTP2_KEEPALIVE_INTERVAL`]
/// (a connection that does not answer within [`HTTP2_KEEPALIVE_TIMEOUT`] is
/// closed), `TCP_NODELAY` on every accepted connection, and without TLS,
/// TCP keepalive after [`TCP_KEEPALIVE`] idle.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: std::sync::Arc<EnvoyRls>,
    tls: Option<std::sync::Arc<ServerTls>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    // `SERVING` once rules are in force (with a management server, after
    // its first set), as the reference server's
    // HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: Envoy's health checks keep
    // away from an instance that would admit everything. The first status
    // is set before the server answers its first call (before, a check
    // that came first found the service not registered); the task follows
    // the changes. (Read before the await: the watch's guard is not
    // `Send`.)
    let mut ready = service.ready();
    let serving = *ready.borrow_and_update();
    report(&reporter, serving).await;
    tokio::spawn(async move {
        while ready.changed().await.is_ok() {
            let serving = *ready.borrow_and_update();
            report(&reporter, serving).await;
        }
    });
    let router = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
        .http2_keepalive_interval(Some(HTTP2_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(HTTP2_KEEPALIVE_TIMEOUT))
        .add_service(health.max_decoding_message_size(MAX_MESSAGE_BYTES))
        .add_service(
            RateLimitServiceServer::from_arc(service).max_decoding_message_size(MAX_MESSAGE_BYTES),
        );
    match tls {
        Some(tls) => {
            router
                .serve_with_incoming_shutdown(crate::tls::incoming(listener, tls), shutdown)
                .await
        }
        None => {
            // The builder's own `tcp_nodelay` and `tcp_keepalive` apply only
            // to listeners it binds itself: the accepted connections get
            // them from the incoming stream. Without `TCP_NODELAY`, a
            // response written in two parts waits for the client's delayed
            // ACK (40 ms on Linux) whenever calls overlap on a connection:
            // that was the p99.9 of the RLS benchmark.
            let incoming = tonic::transport::server::TcpIncoming::from(listener)
                .with_nodelay(Some(true))
                .with_keepalive(Some(TCP_KEEPALIVE));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    }
}
