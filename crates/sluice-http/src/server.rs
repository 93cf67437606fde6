//! Binding the data plane and the control API, serving each on a
//! [`Listener`] (connection caps and timeouts from `[server]`), and shutting
//! them down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sluice_policy::Deployment;
use sluice_policy::Engine;
use sluice_policy::server_settings::ServerSettings;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::data_plane;
use crate::listener::Listener;
use crate::metrics::Metrics;
use crate::proxy::Proxy;

/// The two bound servers, ready to run.
#[derive(Debug)]
pub struct Servers {
    engine: Arc<Engine>,
    /// The upstream, in proxy mode.
    upstream: Option<http::Uri>,
    /// Timeouts and caps of the listeners and the upstream.
    settings: ServerSettings,
    admin: Option<crate::admin::Admin>,
    metrics: Option<Arc<Metrics>>,
    reloader: Option<Arc<crate::reload::Reloader>>,
    descriptors: Option<u64>,
    /// What the data listener serves instead of the data plane.
    data_app: Option<axum::Router>,
    data: TcpListener,
    control: TcpListener,
}

/// File descriptors kept for everything but client connections: config
/// and keys files, Redis connections, logs, the gRPC listener.
const RESERVED_DESCRIPTORS: u64 = 256;

/// The settings, with connection caps that fit in `descriptors` open files
/// (and a warning said when they had to be lowered). The data plane's cap is
/// lowered first; only when the control API's and the upstream's caps
/// alone do not fit are they lowered too, to a quarter of what there is
/// each. The control listener keeps a cap of its own, so that `/healthz`,
/// `/metrics` and reloads are served while the data plane is flooded.
pub fn fit_to_descriptors(mut settings: ServerSettings, descriptors: u64) -> ServerSettings {
    let budget = descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(64);
    let (data, control, upstream) = (
        settings.data.max_connections as u64,
        settings.control.max_connections as u64,
        settings.upstream.max_in_flight as u64,
    );
    if data + control + upstream <= budget {
        return settings;
    }
    let (control, upstream) = if control + upstream + 16 > budget {
        (
            control.min(budget / 4).max(1),
            upstream.min(budget / 4).max(1),
        )
    } else {
        (control, upstream)
    };
    let data = data.min(budget - control - upstream).max(1);
    tracing::warn!(
        descriptors,
        max_connections = data,
        control_max_connections = control,
        upstream_max_in_flight = upstream,
        "the connection caps do not fit in the open-file limit (ulimit -n); lowered"
    );
    let to = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    settings.data.max_connections = to(data);
    settings.control.max_connections = to(control);
    settings.upstream.max_in_flight = to(upstream);
    settings
}

/// How many connections the kernel may queue before they are accepted: a
/// burst of new connections (a flood, or many clients at once) waits there
/// instead of having its SYNs dropped and retried a second later. The
/// kernel caps it at `net.core.somaxconn`.
const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with [`LISTEN_BACKLOG`].
fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Binds the data plane to `deployment.listen` and the control API to
/// `deployment.control_listen`; with `deployment.upstream`, the data plane
/// is a reverse proxy to it. The listeners and the upstream keep the
/// deployment's `[server]` timeouts and caps.
pub async fn serve(engine: Arc<Engine>, deployment: &Deployment) -> std::io::Result<Servers> {
    let data = bind(deployment.listen)?;
    let control = bind(deployment.control_listen)?;
    Ok(Servers {
        engine,
        upstream: deployment.upstream.clone(),
        settings: deployment.server.clone(),
        admin: None,
        metrics: None,
        reloader: None,
        descriptors: None,
        data_app: None,
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

    /// Serves `app` on the data listener instead of the data plane (echo or
    /// proxy): the reference Envoy rate limit server's HTTP API, say. The
    /// listener keeps its connection caps and timeouts.
    pub fn with_data_app(mut self, app: axum::Router) -> Self {
        self.data_app = Some(app);
        self
    }

    /// Fits the connection caps into this many open files (the process's
    /// `RLIMIT_NOFILE`): see [`fit_to_descriptors`].
    pub fn with_descriptor_limit(mut self, descriptors: u64) -> Self {
        self.descriptors = Some(descriptors);
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
        let engine = self.engine.clone();
        let proxy = self.upstream.map(|u| {
            Proxy::new(u, self.settings.upstream).with_trusts(crate::proxy::Trusts(Arc::new(
                move |ip| engine.read_policy(|p| p.trusts(ip)),
            )))
        });
        let metrics = self
            .metrics
            .unwrap_or_else(|| Arc::new(Metrics::new(&self.engine, None)));
        let data_app = match self.data_app {
            Some(app) => app,
            None => data_plane::router(self.engine.clone(), proxy, metrics.clone()),
        };
        let metrics_for_listeners = metrics.clone();
        let reservations = Arc::new(crate::reservations::Reservations::new(
            self.settings.reservation_ttl,
            self.settings.max_reservations,
        ));
        let mut control_app =
            crate::control::router_with(self.engine.clone(), metrics, self.reloader, reservations);
        if let Some(admin) = self.admin {
            control_app = control_app.merge(crate::admin::router(admin));
        }

        let mut settings = self.settings;
        if let Some(n) = self.descriptors {
            settings = fit_to_descriptors(settings, n);
        }
        let data = Listener::new(self.data, settings.data, self.engine.clone());
        let control = Listener::new(self.control, settings.control, self.engine.clone());
        metrics_for_listeners.watch_listener("data", data.limits().clone());
        metrics_for_listeners.watch_listener("control", control.limits().clone());
        let data = data.serve(data_app, rx.clone());
        let control = control.serve(control_app, rx.clone());

        // Forget fully replenished keys in the background.
        let store = self.engine.store().clone();
        let purge = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let store = store.clone();
                let _ = tokio::task::spawn_blocking(move || store.purge_idle()).await;
            }
        });

        tokio::spawn(async move {
            shutdown.await;
            let _ = tx.send(true);
        });
        tokio::join!(data, control);
        purge.abort();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_that_fit_are_kept_and_others_are_lowered_to_fit() {
        let d = ServerSettings::default();
        assert_eq!(fit_to_descriptors(d.clone(), 1_000_000), d);
        // 20,000 files: the data plane gives way to the other caps.
        let f = fit_to_descriptors(d.clone(), 20_000);
        assert_eq!(f.control.max_connections, 1_024);
        assert_eq!(f.upstream.max_in_flight, 1_024);
        assert_eq!(f.data.max_connections, 10_000);
        let f = fit_to_descriptors(d.clone(), 5_000);
        assert_eq!(f.data.max_connections, 5_000 - 256 - 2 * 1_024);
        // 300 files: every cap shrinks, and together they fit.
        let f = fit_to_descriptors(d, 300);
        let total = f.data.max_connections + f.control.max_connections + f.upstream.max_in_flight;
        assert!(total as u64 <= 300_u64.saturating_sub(256).max(64), "{f:?}");
        assert!(f.control.max_connections >= 1 && f.data.max_connections >= 1);
    }
}
