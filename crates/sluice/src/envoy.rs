//! The Envoy Rate Limit Service, wired: its rules (from files, reloaded,
//! or from an xDS management server), its listener and TLS, on the engine's
//! store.

use std::sync::Arc;

use anyhow::Context;
use sluice_policy::Engine;

/// The Envoy Rate Limit Service, bound: it shares the engine's store
/// (memory, or Redis with its fallback, named by the same keyed hashes).
/// Its YAML reloads (or xDS updates) are counted in `counts`.
pub(crate) async fn service(
    e: &sluice_policy::EnvoySettings,
    engine: &Arc<Engine>,
    counts: Arc<sluice_policy::reload_counts::ReloadCounts>,
) -> anyhow::Result<EnvoyService> {
    let loading = sluice_envoy::Loading {
        algorithm: e.algorithm,
        merge_domains: e.merge_domains,
        shadow_mode: e.shadow_mode,
    };
    // With a management server, the rules come from it; until its first
    // answer, every domain is unknown (and answered `OK`).
    let (rules, texts) = match &e.xds {
        None => {
            // Read once: the reloader compares with what was compiled.
            let texts = sluice_envoy::Texts::read(&e.configs)?;
            let rules =
                sluice_envoy::Rules::compile_all(&texts, engine.store().as_ref(), &loading)?;
            (rules, texts)
        }
        Some(_) => (
            sluice_envoy::Rules::default(),
            sluice_envoy::Texts(Vec::new()),
        ),
    };
    let addr = e.grpc_listen;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind {addr}"))?;
    let options = sluice_envoy::Options {
        compat: e.compat,
        response_headers: e.response_headers,
        dynamic_metadata: e.response_dynamic_metadata,
        algorithm: e.algorithm,
    };
    let service = Arc::new(
        sluice_envoy::EnvoyRls::new(Arc::new(rules), engine.clone()).with_options(options),
    );
    let rules = match &e.xds {
        None => Some(Arc::new(
            sluice_envoy::RulesReloader::new(
                service.clone(),
                e.configs.clone(),
                engine.store().clone(),
                loading,
                texts,
            )
            .counting_in(counts),
        )),
        Some(x) => {
            let client = sluice_envoy::xds::XdsClient::new(
                xds_settings(x)?,
                service.clone(),
                engine.store().clone(),
                loading,
            )
            .counting_in(counts);
            tokio::spawn(client.run());
            None
        }
    };
    let tls = match &e.tls {
        None => None,
        Some(t) => Some(Arc::new(sluice_envoy::tls::ServerTls::load(
            sluice_envoy::tls::TlsFiles {
                cert: t.cert.clone(),
                key: t.key.clone(),
                client_ca: t.client_ca.clone(),
            },
        )?)),
    };
    Ok(EnvoyService {
        listener,
        service,
        rules,
        tls,
    })
}

/// The Envoy Rate Limit Service, bound: its listener, the service, the
/// reloader of its YAML configs (none with a management server), and its
/// TLS settings.
pub(crate) struct EnvoyService {
    pub(crate) listener: tokio::net::TcpListener,
    pub(crate) service: Arc<sluice_envoy::EnvoyRls>,
    pub(crate) rules: Option<Arc<sluice_envoy::RulesReloader>>,
    pub(crate) tls: Option<Arc<sluice_envoy::tls::ServerTls>>,
}

/// `[envoy.xds]` as the client takes it.
fn xds_settings(x: &sluice_policy::EnvoyXds) -> anyhow::Result<sluice_envoy::xds::XdsSettings> {
    Ok(sluice_envoy::xds::XdsSettings {
        server: x.server.clone(),
        node_id: x.node_id.clone(),
        node_cluster: x.node_cluster.clone(),
        ca: x.ca.clone(),
        identity: x.identity.clone(),
    })
}

/// Serves the Rate Limit Service in a task of its own until `stopping`
/// turns true: its address and the task.
pub(crate) fn spawn(
    rls: EnvoyService,
    mut stopping: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(
    std::net::SocketAddr,
    tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
)> {
    let EnvoyService {
        listener,
        service,
        tls,
        ..
    } = rls;
    let addr = listener.local_addr()?;
    let stopped = async move {
        let _ = stopping.wait_for(|s| *s).await;
    };
    let task = tokio::spawn(sluice_envoy::serve(listener, service, tls, stopped));
    Ok((addr, task))
}
