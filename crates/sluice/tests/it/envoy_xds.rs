//! `[envoy.xds]`: the rules from an xDS management server, over ADS, state
//! of the world, as envoyproxy/ratelimit takes them with
//! `CONFIG_TYPE=GRPC_XDS_SOTW`. The test runs a small management server: it
//! pushes a config, then a change, then a bad config, which Sluice NACKs
//! and which leaves the old rules serving; then it goes away and comes
//! back, and Sluice reconnects.

use std::net::SocketAddr;
use std::time::Duration;

use crate::common::Sluice;
use crate::envoy_rls::descriptor;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use envoy_types::pb::envoy::service::discovery::v3::{
    DeltaDiscoveryRequest, DeltaDiscoveryResponse, DiscoveryRequest, DiscoveryResponse,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf::Any;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};
use prost::Message;
use tokio::sync::{Mutex, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// A management server that hands each stream's responses to the test, and
/// the requests it gets back.
struct Management {
    requests: mpsc::UnboundedSender<DiscoveryRequest>,
    responses: Mutex<Option<mpsc::Receiver<Result<DiscoveryResponse, Status>>>>,
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Management {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;
    type DeltaAggregatedResourcesStream = ReceiverStream<Result<DeltaDiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let mut inbound = request.into_inner();
        let tx = self.requests.clone();
        tokio::spawn(async move {
            while let Ok(Some(r)) = inbound.message().await {
                let _ = tx.send(r);
            }
        });
        let rx = self
            .responses
            .lock()
            .await
            .take()
            .ok_or_else(|| Status::unavailable("one stream"))?;
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn delta_aggregated_resources(
        &self,
        _: Request<Streaming<DeltaDiscoveryRequest>>,
    ) -> Result<Response<Self::DeltaAggregatedResourcesStream>, Status> {
        Err(Status::unimplemented("state of the world only"))
    }
}

/// A running management server: what it receives, what it sends, and how
/// to stop it.
struct Server {
    requests: mpsc::UnboundedReceiver<DiscoveryRequest>,
    responses: mpsc::Sender<Result<DiscoveryResponse, Status>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(addr: SocketAddr) -> (Self, SocketAddr) {
        Self::start_tls(addr, None).await
    }

    /// With `tls`: over TLS with this identity, requiring client
    /// certificates signed by the CA if one is given.
    async fn start_tls(
        addr: SocketAddr,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> (Self, SocketAddr) {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (req_tx, requests) = mpsc::unbounded_channel();
        let (responses, resp_rx) = mpsc::channel(8);
        let service = Management {
            requests: req_tx,
            responses: Mutex::new(Some(resp_rx)),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap();
        }
        let done = tokio::spawn(async move {
            let _ = builder
                .add_service(AggregatedDiscoveryServiceServer::new(service))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await;
        });
        let server = Self {
            requests,
            responses,
            stop: Some(stop),
            done,
        };
        (server, addr)
    }

    /// The next request from Sluice (within 20 s).
    async fn next_request(&mut self) -> DiscoveryRequest {
        tokio::time::timeout(Duration::from_secs(20), self.requests.recv())
            .await
            .expect("a request within 20 s")
            .expect("the stream")
    }

    /// Pushes the set of `configs` as `version`, with nonce `nonce`.
    async fn push(&self, version: &str, nonce: &str, configs: &[RateLimitConfig]) {
        let resources = configs
            .iter()
            .map(|c| Any {
                type_url: TYPE_URL.into(),
                value: c.encode_to_vec(),
            })
            .collect();
        let response = DiscoveryResponse {
            version_info: version.into(),
            resources,
            type_url: TYPE_URL.into(),
            nonce: nonce.into(),
            ..Default::default()
        };
        self.responses.send(Ok(response)).await.unwrap();
    }

    async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        drop(self.responses);
        let _ = self.done.await;
    }
}

/// The domain `xds` with one rule of `rpu` per hour on key `user`, or with
/// `unlimited` beside a unit (which the reference server refuses).
fn config(rpu: u32, bad: bool) -> RateLimitConfig {
    RateLimitConfig {
        name: "xds-test".into(),
        domain: "xds".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy {
                unit: 3,
                requests_per_unit: rpu,
                unlimited: bad,
                ..Default::default()
            }),
            ..Default::default()
        }],
    }
}

/// The limit a descriptor of `user` meets now: `(requests_per_unit,
/// remaining)`.
async fn limit(grpc: SocketAddr, user: &str) -> Option<(u32, u32)> {
    let mut c = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let r = c
        .should_rate_limit(RateLimitRequest {
            domain: "xds".into(),
            descriptors: vec![descriptor(&[("user", user)])],
            hits_addend: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let s = &r.statuses[0];
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, s.limit_remaining))
}

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;

/// The health service's status of the Rate Limit Service.
async fn health(grpc: SocketAddr) -> i32 {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let channel = tonic::transport::Channel::from_shared(format!("http://{grpc}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = HealthClient::new(channel);
    c.check(HealthCheckRequest {
        service: "envoy.service.ratelimit.v3.RateLimitService".into(),
    })
    .await
    .unwrap()
    .into_inner()
    .status
}

#[tokio::test]
async fn a_management_server_drives_the_rules_and_a_bad_config_is_nacked() {
    let (mut server, addr) = Server::start("127.0.0.1:0".parse().unwrap()).await;
    let toml = format!(
        "[envoy]\ngrpc_listen = \"127.0.0.1:0\"\n\n[envoy.xds]\nserver = \"http://{addr}\"\nnode_id = \"sluice-test\"\n"
    );
    let s = Sluice::start_with("envoy-xds", &toml);
    let grpc = s.grpc.expect("grpc");
    // The first request asks for every RateLimitConfig, as this node.
    let first = server.next_request().await;
    assert_eq!(first.type_url, TYPE_URL);
    assert_eq!(
        first.node.as_ref().map(|n| n.id.as_str()),
        Some("sluice-test")
    );
    assert_eq!(
        (first.version_info.as_str(), first.response_nonce.as_str()),
        ("", "")
    );
    assert_eq!(
        limit(grpc, "a").await,
        None,
        "no rules before the first push"
    );
    assert_eq!(health(grpc).await, NOT_SERVING, "no rules: not serving");
    // An empty set would switch every limit off: refused.
    server.push("0", "n0", &[]).await;
    let nack = server.next_request().await;
    assert_eq!(
        (nack.version_info.as_str(), nack.response_nonce.as_str()),
        ("", "n0")
    );
    assert!(
        nack.error_detail
            .is_some_and(|e| e.message.contains("holds no RateLimitConfig"))
    );
    assert_eq!(health(grpc).await, NOT_SERVING);

    server.push("1", "n1", &[config(3, false)]).await;
    let ack = server.next_request().await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("1", "n1")
    );
    assert!(ack.error_detail.is_none());
    assert_eq!(limit(grpc, "a").await, Some((3, 2)));
    assert_eq!(health(grpc).await, SERVING);

    server.push("2", "n2", &[config(5, false)]).await;
    let ack = server.next_request().await;
    assert_eq!(
        (ack.version_info.as_str(), ack.response_nonce.as_str()),
        ("2", "n2")
    );
    assert_eq!(limit(grpc, "a").await, Some((5, 4)));

    // Refused: a NACK names the last accepted version, the nonce and why;
    // version 2 keeps serving, its counters with it.
    server.push("3", "n3", &[config(7, true)]).await;
    let nack = server.next_request().await;
    assert_eq!(
        (nack.version_info.as_str(), nack.response_nonce.as_str()),
        ("2", "n3")
    );
    let why = nack.error_detail.expect("error_detail").message;
    assert!(
        why.contains("should not specify rate limit unit when unlimited"),
        "{why}"
    );
    assert_eq!(limit(grpc, "a").await, Some((5, 3)));

    // The server goes away: the rules stay. It comes back on the same
    // address: Sluice reconnects (with backoff) and takes its config.
    server.stop().await;
    assert_eq!(limit(grpc, "a").await, Some((5, 2)));
    let (mut back, _) = Server::start(addr).await;
    let again = back.next_request().await;
    assert_eq!(again.type_url, TYPE_URL);
    back.push("4", "n4", &[config(9, false)]).await;
    let ack = back.next_request().await;
    assert_eq!(ack.version_info, "4");
    assert_eq!(limit(grpc, "a").await, Some((9, 8)));
    assert!(s.log().contains("xDS: session ended"), "{}", s.log());
}

#[tokio::test]
async fn the_management_server_over_mtls() {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let Some(certs) = crate::common::certs::Certs::new("xds-mtls") else {
        return;
    };
    certs.ca("ca");
    certs.signed("mgmt", "ca", true);
    certs.signed("sluice", "ca", false);
    let read = |n: &str| std::fs::read(certs.path(n)).unwrap();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(read("mgmt.crt"), read("mgmt.key")))
        .client_ca_root(Certificate::from_pem(read("ca.crt")));
    let (mut server, addr) = Server::start_tls("127.0.0.1:0".parse().unwrap(), Some(tls)).await;
    let toml = format!(
        "[envoy]\ngrpc_listen = \"127.0.0.1:0\"\n\n[envoy.xds]\nserver = \"https://localhost:{}\"\nca = \"{}\"\ncert = \"{}\"\nkey = \"{}\"\n",
        addr.port(),
        certs.path("ca.crt").display(),
        certs.path("sluice.crt").display(),
        certs.path("sluice.key").display(),
    );
    let s = Sluice::start_with("envoy-xds-tls", &toml);
    let first = server.next_request().await;
    assert_eq!(first.type_url, TYPE_URL, "log:\n{}", s.log());
    server.push("1", "n1", &[config(3, false)]).await;
    let ack = server.next_request().await;
    assert_eq!(ack.version_info, "1");
    assert_eq!(limit(s.grpc.expect("grpc"), "a").await, Some((3, 2)));
}
