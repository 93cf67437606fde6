//! Binding the data plane and the control API, and shutting them down
//! gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_policy::Engine;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::data_plane;
use crate::metrics::Metrics;
use crate::proxy::Proxy;

/// The two bound servers, ready to run.
#[derive(Debug)]
pub struct Servers {
    engine: Arc<Engine>,
    admin: Option<crate::admin::Admin>,
    metrics: Option<Arc<Metrics>>,
    reloader: Option<Arc<crate::reload::Reloader>>,
    data: TcpListener,
    control: TcpListener,
}

/// Binds the data plane to `listen` and the control API to `control_listen`.
pub async fn serve(
    engine: Arc<Engine>,
    listen: SocketAddr,
    control_listen: SocketAddr,
) -> std::io::Result<Servers> {
    let data = TcpListener::bind(listen).await?;
    let control = TcpListener::bind(control_listen).await?;
    Ok(Servers {
        engine,
        admin: None,
        metrics: None,
        reloader: None,
        data,
        control,
    })
}

impl Servers {
    /// Serves the admin routes on the control listener too.
    pub fn with_admin(mut self, admin: crate::admin::Admin) -> Self {
        self.admin = Some(admin);
        self
    }

    /// Records decisions in `metrics` (served at `/metrics`). Without it,
    /// the servers keep metrics of their own.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Shows the reloader's config version on the status page.
    pub fn with_reloader(mut self, reloader: Arc<crate::reload::Reloader>) -> Self {
        self.reloader = Some(reloader);
        self
    }

    /// The data plane's bound address.
    pub fn data_addr(&self) -> std::io::Result<SocketAddr> {
        self.data.local_addr()
    }

    /// The control API's bound address.
    pub fn control_addr(&self) -> std::io::Result<SocketAddr> {
        self.control.local_addr()
    }

    /// Serves until `shutdown` completes, then finishes the requests in
    /// flight and returns.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let (tx, rx) = watch::channel(false);
        let proxy = self.engine.policy().upstream.clone().map(Proxy::new);
        let metrics = self
            .metrics
            .unwrap_or_else(|| Arc::new(Metrics::new(&self.engine, None)));
        let data_app = data_plane::router(self.engine.clone(), proxy, metrics.clone());
        let mut control_app =
            crate::control::router_with(self.engine.clone(), metrics, self.reloader);
        if let Some(admin) = self.admin {
            control_app = control_app.merge(crate::admin::router(admin));
        }

        let stop = |mut rx: watch::Receiver<bool>| async move {
            let _ = rx.wait_for(|stopped| *stopped).await;
        };
        let data = axum::serve(
            self.data,
            data_app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop(rx.clone()));
        let control = axum::serve(
            self.control,
            control_app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(stop(rx.clone()));

        // Forget fully replenished keys in the background.
        let store = self.engine.store().clone();
        let purge = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let store = store.clone();
                let _ = tokio::task::spawn_blocking(move || store.purge_expired()).await;
            }
        });

        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(true);
        });
        let (a, b) = tokio::join!(data.into_future(), control.into_future());
        purge.abort();
        a.and(b)
    }
}
