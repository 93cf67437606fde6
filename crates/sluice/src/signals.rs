//! What signals and time do to a running `sluice serve`: SIGHUP and file
//! changes reload the config; SIGTERM and SIGINT stop it, with a deadline
//! for the requests in flight.

use std::future::Future;
use std::sync::Arc;

use sluice_http::reload::Reloader;

/// Serves until `stopped` completes (and sends on the stop channel that
/// `stopping` watches). Requests in flight then get `timeout` to finish;
/// those left are cut off, however long their bodies or upstreams would
/// take.
pub(crate) async fn serve_until<E>(
    servers: sluice_http::Servers,
    grpc: Option<tokio::task::JoinHandle<Result<(), E>>>,
    stopped: impl Future<Output = ()> + Send + 'static,
    mut stopping: tokio::sync::watch::Receiver<bool>,
    timeout: std::time::Duration,
) -> anyhow::Result<()>
where
    E: std::error::Error + Send + Sync + 'static,
{
    let drained = async move {
        servers.run(stopped).await?;
        if let Some(task) = grpc {
            task.await??;
        }
        anyhow::Ok(())
    };
    let deadline = async move {
        let _ = stopping.wait_for(|s| *s).await;
        tokio::time::sleep(timeout).await;
    };
    tokio::select! {
        drained = drained => drained,
        () = deadline => {
            tracing::warn!(?timeout, "requests still in flight at the shutdown deadline are cut off");
            Ok(())
        }
    }
}

/// Reloads the config, and the Envoy YAML configs, on SIGHUP and when a
/// file changes (polled every second). Failures are logged by the
/// reloaders; the running config stays.
pub(crate) fn spawn_reload_triggers(
    reloader: Arc<Reloader>,
    rules: Option<Arc<sluice_envoy::RulesReloader>>,
    tls: Option<Arc<sluice_envoy::tls::ServerTls>>,
) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let on_hup = reloader.clone();
        let hup_rules = rules.clone();
        match signal(SignalKind::hangup()) {
            Ok(mut hup) => {
                tokio::spawn(async move {
                    while hup.recv().await.is_some() {
                        tracing::info!("SIGHUP: reloading the config");
                        let (r, y) = (on_hup.clone(), hup_rules.clone());
                        let _ = tokio::task::spawn_blocking(move || {
                            let _ = r.reload(true);
                            if let Some(y) = y {
                                let _ = y.reload(true);
                            }
                        })
                        .await;
                    }
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot listen for SIGHUP"),
        }
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let (r, y, t) = (reloader.clone(), rules.clone(), tls.clone());
            let _ = tokio::task::spawn_blocking(move || {
                let _ = r.reload(false);
                if let Some(y) = y {
                    let _ = y.reload(false);
                }
                if let Some(t) = t
                    && let Err(e) = t.reload()
                {
                    tracing::error!(error = %e, "gRPC TLS files do not load; the running certificate stays");
                }
            })
            .await;
        }
    });
}

/// Completes on SIGINT (Ctrl-C) or SIGTERM. The signal handlers are
/// installed when this is called, not when the future is first polled.
#[cfg(unix)]
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    async fn recv(signal: Option<Signal>) {
        match signal {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    }
    let int = recv(signal(SignalKind::interrupt()).ok());
    let term = recv(signal(SignalKind::terminate()).ok());
    async move {
        tokio::select! {
            () = int => {},
            () = term => {},
        }
        tracing::info!("shutting down: finishing requests in flight");
    }
}

/// Completes on Ctrl-C.
#[cfg(not(unix))]
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("shutting down: finishing requests in flight");
    }
}
