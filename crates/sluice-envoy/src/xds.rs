//! The rules from an xDS management server (`[envoy.xds]`), as the
//! reference server takes them with `CONFIG_TYPE=GRPC_XDS_SOTW`: over ADS
//! (`envoy.service.discovery.v3.AggregatedDiscoveryService`), state of the
//! world, resources of type
//! `type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig`.
//!
//! - Each response holds the whole set: its configs are checked and compiled
//!   as files are (one domain each, none twice), and replace the rules in
//!   force. Unchanged rules keep their counters.
//! - A set that loads is acknowledged (ACK: its `version_info` and
//!   `nonce`); one that does not is refused (NACK: the last accepted
//!   version, the nonce, and `error_detail` saying why), logged, and the
//!   running rules keep serving.
//! - A lost connection or stream is retried with exponential backoff and
//!   jitter, from [`BACKOFF_MIN`] to [`BACKOFF_MAX`]; the rules in force
//!   stay meanwhile.
//! - Messages are at most [`MAX_MESSAGE_BYTES`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::Node;
use envoy_types::pb::envoy::service::discovery::v3::aggregated_discovery_service_client::AggregatedDiscoveryServiceClient;
use envoy_types::pb::envoy::service::discovery::v3::{DiscoveryRequest, DiscoveryResponse};
use envoy_types::pb::google::rpc::Status as RpcStatus;
use envoy_types::pb::ratelimit::config::ratelimit::v3::RateLimitConfig;
use prost::Message;
use sluice_policy::reload_counts::ReloadCounts;
use sluice_store::seam::Store;
use tokio::sync::mpsc;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::answer::EnvoyRls;
use crate::compile::{Loading, RulesError, compile_config};
use crate::rules::Rules;

/// The resource type asked for.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// The first wait before reconnecting.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);

/// The longest wait before reconnecting.
pub const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// The largest message taken from the management server.
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// `[envoy.xds]`.
#[derive(Debug, Clone)]
pub struct XdsSettings {
    /// The management server: `http://host:port`, or `https://` with `tls`.
    pub server: String,
    /// This node's id (the reference server's `CONFIG_GRPC_XDS_NODE_ID`).
    pub node_id: String,
    /// This node's cluster.
    pub node_cluster: String,
    /// With `https://`: the CA of the server's certificate, PEM.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, PEM, for mTLS.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl XdsSettings {
    /// TLS to the management server, the files read now (so that a
    /// rotated certificate is used at the next connection).
    fn tls(&self) -> Result<Option<ClientTlsConfig>, SessionError> {
        let Some(ca) = &self.ca else { return Ok(None) };
        let read = |p: &PathBuf| {
            sluice_policy::file_read::read_bytes(p, 1 << 20)
                .map_err(|e| SessionError::Files(format!("{}: {e}", p.display())))
        };
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(ca)?));
        if let Some((cert, key)) = &self.identity {
            tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
        }
        Ok(Some(tls))
    }
}

/// Why an xDS session ended.
#[derive(Debug, thiserror::Error)]
enum SessionError {
    #[error("cannot connect: {0}")]
    Connect(#[from] tonic::transport::Error),
    #[error("stream failed: {0}")]
    Stream(#[from] tonic::Status),
    #[error("the management server closed the stream")]
    Closed,
    #[error("TLS files: {0}")]
    Files(String),
}

/// Keeps a service's rules in step with a management server.
#[derive(Debug)]
pub struct XdsClient {
    settings: XdsSettings,
    service: Arc<EnvoyRls>,
    store: Arc<dyn Store>,
    loading: Loading,
    /// Where each set applied or refused is counted.
    counts: Arc<ReloadCounts>,
}

impl XdsClient {
    /// A client that replaces `service`'s rules with what the server sends,
    /// registering their counters in `store`.
    pub fn new(
        settings: XdsSettings,
        service: Arc<EnvoyRls>,
        store: Arc<dyn Store>,
        loading: Loading,
    ) -> Self {
        Self {
            settings,
            service,
            store,
            loading,
            counts: Arc::default(),
        }
    }

    /// Counts the sets applied and refused in `counts` (the server's
    /// reload counts).
    pub fn counting_in(mut self, counts: Arc<ReloadCounts>) -> Self {
        self.counts = counts;
        self
    }

    /// Follows the management server for ever, reconnecting with backoff.
    pub async fn run(self) {
        let mut wait = BACKOFF_MIN;
        loop {
            match self.session(&mut wait).await {
                Ok(()) => {}
                Err(e) => {
                    tracing::warn!(server = %self.settings.server, error = %e, "xDS: session ended; the rules in force stay")
                }
            }
            tokio::time::sleep(jittered(wait)).await;
            wait = (wait * 2).min(BACKOFF_MAX);
        }
    }

    /// One stream: ask, then apply and answer each response. `wait` goes
    /// back to its minimum once a response is applied.
    async fn session(&self, wait: &mut Duration) -> Result<(), SessionError> {
        // Pings find a connection that died without a word (a NAT timeout,
        // a partition): the stream then fails and is opened again.
        let mut endpoint = Endpoint::from_shared(self.settings.server.clone())?
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true)
            .tcp_keepalive(Some(Duration::from_secs(60)));
        if let Some(tls) = self.settings.tls()? {
            endpoint = endpoint.tls_config(tls)?;
        }
        let channel: Channel = endpoint.connect().await?;
        let mut client = AggregatedDiscoveryServiceClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(4);
        let mut accepted = String::new();
        let _ = tx.send(self.request(&accepted, "", None)).await;
        let mut responses = client
            .stream_aggregated_resources(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await?
            .into_inner();
        while let Some(response) = responses.message().await? {
            if response.type_url != TYPE_URL {
                continue;
            }
            // Compiling a large set is work for a blocking thread, not for
            // a runtime worker that also answers ShouldRateLimit.
            let (store, loading) = (self.store.clone(), self.loading);
            let (response, compiled) = tokio::task::spawn_blocking(move || {
                let compiled = compile_set(&response, store.as_ref(), &loading);
                (response, compiled)
            })
            .await
            .map_err(|e| SessionError::Files(format!("compiling the configs failed: {e}")))?;
            let applied = compiled.map(|rules| {
                let domains = rules.domains().len();
                self.service.replace_rules(Arc::new(rules));
                domains
            });
            let answer = match applied {
                Ok(domains) => {
                    self.counts.record(true);
                    *wait = BACKOFF_MIN;
                    accepted = response.version_info.clone();
                    tracing::info!(version = %shown(&accepted), domains, "xDS: rate limit configs applied");
                    self.request(&accepted, &response.nonce, None)
                }
                Err(e) => {
                    self.counts.record(false);
                    tracing::error!(version = %shown(&response.version_info), error = %e, "xDS: rate limit configs refused (NACK); the rules in force stay");
                    self.request(&accepted, &response.nonce, Some(e.to_string()))
                }
            };
            if tx.send(answer).await.is_err() {
                break;
            }
        }
        Err(SessionError::Closed)
    }

    /// A request for the configs: an ACK of `version` (a NACK with
    /// `error`) for `nonce`.
    fn request(&self, version: &str, nonce: &str, error: Option<String>) -> DiscoveryRequest {
        DiscoveryRequest {
            version_info: version.to_owned(),
            node: Some(Node {
                id: self.settings.node_id.clone(),
                cluster: self.settings.node_cluster.clone(),
                ..Default::default()
            }),
            type_url: TYPE_URL.to_owned(),
            response_nonce: nonce.to_owned(),
            error_detail: error.map(|message| RpcStatus {
                code: tonic::Code::InvalidArgument as i32,
                message,
                details: Vec::new(),
            }),
            ..Default::default()
        }
    }
}

/// `wait`, less up to a quarter at random: clients that lost the server
/// together do not come back together.
fn jittered(wait: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let quarter = wait / 4;
    wait - quarter.mul_f64(f64::from(nanos % 1000) / 1000.0)
}

/// Compiles a response's configs, registering their counters in `store`.
/// A set without any is refused: it would switch every limit off.
fn compile_set(
    response: &DiscoveryResponse,
    store: &dyn Store,
    loading: &Loading,
) -> Result<Rules, RulesError> {
    let mut rules = Rules::default();
    for (i, any) in response.resources.iter().enumerate() {
        let invalid = |message: String| RulesError::Files {
            file: format!("xds resource {i}"),
            message,
        };
        if any.type_url != TYPE_URL {
            return Err(invalid(format!("type `{}`, not {TYPE_URL}", any.type_url)));
        }
        let config = RateLimitConfig::decode(any.value.as_slice())
            .map_err(|e| invalid(format!("not a RateLimitConfig: {e}")))?;
        let name = format!("xds:{}", config.name);
        let yaml = crate::from_proto::yaml_of(&config);
        compile_config(&mut rules, &name, "", &yaml, store, loading)?;
    }
    if rules.domains().is_empty() {
        // An empty set would switch every limit off.
        return Err(RulesError::Files {
            file: "xds".into(),
            message: format!(
                "version `{}` holds no RateLimitConfig; every request would pass unlimited",
                shown(&response.version_info)
            ),
        });
    }
    Ok(rules)
}

/// A version as logs show it: the management server chooses it, and a
/// message may be up to 16 MiB, so at most 64 characters.
fn shown(version: &str) -> String {
    version.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_server_s_version_is_cut_for_the_log() {
        let long = "v".repeat(1 << 20);
        assert_eq!(super::shown(&long).len(), 64);
        assert_eq!(super::shown("v1"), "v1");
    }
}
