//! `sluice envoy-ratelimit`: the reference Envoy rate limit server's mode,
//! configured by its environment alone (see
//! [`sluice_envoy::reference_env`]). Its HTTP port serves `/json` and
//! `/healthcheck`, its debug port Sluice's control API (`/metrics`), its
//! gRPC port the Rate Limit Service.

use std::sync::Arc;

use sluice_envoy::http_api::Healthy;
use sluice_envoy::reference_env::{HealthSettings, ReferenceEnv};
use sluice_policy::{Deployment, Engine, Policy, Source};
use sluice_store::seam::BreakerState;

/// The name config errors give the environment's config.
const ORIGIN: &str = "<environment>";

/// The environment, read: the config it makes and the health it asks for.
pub(crate) struct FromEnv {
    /// The config, as TOML.
    pub(crate) toml: String,
    /// What `/healthcheck` watches.
    pub(crate) health: HealthSettings,
}

/// Reads the environment (variables that are not Unicode are skipped: none
/// of the reference server's is), starts logging as `LOG_LEVEL` and
/// `LOG_FORMAT` say (`SLUICE_LOG` overrides the level), says what has no
/// effect, and compiles the config it makes.
pub(crate) fn load() -> anyhow::Result<(FromEnv, Policy, Deployment)> {
    let vars = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
    let env = ReferenceEnv::read(vars)?;
    init_logging(env.log_level, env.log_json);
    for warning in &env.warnings {
        tracing::warn!("{warning}");
    }
    let source = Source {
        file: ORIGIN.into(),
        text: env.toml.clone(),
    };
    let config = source.parse()?;
    let mut deployment = Deployment::compile(&source, &config)?;
    if let Some(url) = &env.store_url {
        deployment.store.url = Some(url.clone());
    }
    let policy = Policy::compile(&source, &config)?;
    let from_env = FromEnv {
        toml: env.toml,
        health: env.health,
    };
    Ok((from_env, policy, deployment))
}

fn init_logging(level: &str, json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// The reference server's HTTP API (`/json`, `/healthcheck`) over the
/// Rate Limit Service, healthy as [`healthy`] says.
pub(crate) fn http_api(
    env: &FromEnv,
    engine: &Arc<Engine>,
    service: &Arc<sluice_envoy::EnvoyRls>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> axum::Router {
    let healthy = healthy(env.health, engine.clone(), service.ready(), stopping);
    sluice_envoy::http_api::router(service.clone(), healthy)
}

/// Healthy as the reference server is: not stopping; with
/// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`, once rules are in force; on
/// Redis, once it has been reached, and with
/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION` only while it can be (Sluice
/// knows Redis is down when its circuit breaker has opened).
fn healthy(
    settings: HealthSettings,
    engine: Arc<Engine>,
    rules_ready: tokio::sync::watch::Receiver<bool>,
    stopping: tokio::sync::watch::Receiver<bool>,
) -> Healthy {
    Arc::new(move || {
        if *stopping.borrow() || (settings.needs_config && !*rules_ready.borrow()) {
            return false;
        }
        if !settings.redis {
            return true;
        }
        let Some(health) = engine.remote_health() else {
            return true;
        };
        // `connected` stays once Redis has been reached.
        if settings.redis_active_check {
            health.connected && health.breaker != BreakerState::Open
        } else {
            health.connected
        }
    })
}
