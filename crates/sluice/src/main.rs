//! `sluice`: the binary. It only wires the library crates together.
//!
//! - `sluice serve --config FILE [--listen ADDR] [--control-listen ADDR]`
//! - `sluice validate --config FILE`
//! - `sluice simulate --config FILE --log ACCESS_LOG [--format nginx|jsonl] [--out report.html] [--json]`

mod envoy;
mod envoy_ratelimit;
mod generate;
mod signals;
mod simulate;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use sluice_http::admin::Admin;
use sluice_http::metrics::Metrics;
use sluice_http::reload::Reloader;
use sluice_policy::store_settings::{StoreSettings, parse_store_url};
use sluice_policy::{Deployment, Engine, Policy};
use sluice_redis::RuntimeState;
use sluice_store::KeyHasher;

/// Sluice: rate limits for APIs.
#[derive(Debug, Parser)]
#[command(version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the data plane (echo or reverse proxy) and the control API.
    Serve {
        /// The config file (TOML).
        #[arg(long)]
        config: PathBuf,
        /// Override the data plane's address.
        #[arg(long)]
        listen: Option<SocketAddr>,
        /// Override the control API's address.
        #[arg(long)]
        control_listen: Option<SocketAddr>,
        /// Override the Envoy Rate Limit Service's address (needs `[envoy]`).
        #[arg(long)]
        grpc_listen: Option<SocketAddr>,
        /// Override the config's store: `memory://`, `redis://HOST:PORT`,
        /// `rediss://…`, `redis+cluster://H1:P1,H2:P2`,
        /// `redis+shards://H1:P1,H2:P2` or `redis+sentinel://S1:P1/MASTER`.
        #[arg(long)]
        store_url: Option<String>,
        /// Log format.
        #[arg(long, value_enum, default_value_t = LogFormat::Text)]
        log_format: LogFormat,
    },
    /// Check a config file: exit 0 if it is valid, else print
    /// `FILE:LINE:COL: message` and exit 2.
    Validate {
        /// The config file (TOML).
        #[arg(long)]
        config: PathBuf,
    },
    /// Run as envoyproxy/ratelimit does, configured by its environment
    /// variables alone (RUNTIME_ROOT, REDIS_URL, GRPC_PORT, …): gRPC on
    /// GRPC_PORT, /json and /healthcheck on PORT, /metrics on DEBUG_PORT.
    EnvoyRatelimit,
    /// Replay an access log through a config on a virtual clock and report
    /// who would have been limited.
    Simulate(simulate::Args),
    /// Write the man pages or a shell's completions (for packagers).
    #[command(hide = true)]
    Generate(generate::Args),
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// `sluice --version`: the version and the commit built
/// (`build.rs`).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("SLUICE_COMMIT"),
    ")"
);

/// The name under which the binary runs as `sluice envoy-ratelimit`: a link
/// named `/bin/ratelimit`, where the reference server's Deployments start
/// it.
const REFERENCE_NAME: &str = "ratelimit";

fn main() -> ExitCode {
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_owned()));
    let command = if invoked_as.is_some_and(|n| n == REFERENCE_NAME) {
        Command::EnvoyRatelimit
    } else {
        Cli::parse().command
    };
    match command {
        Command::Simulate(args) => simulate::run(args),
        Command::Generate(args) => generate::run(args, &Cli::command()),
        Command::EnvoyRatelimit => run_envoy_ratelimit(),
        Command::Validate { config } => validate(&config),
        Command::Serve {
            config,
            listen,
            control_listen,
            grpc_listen,
            store_url,
            log_format,
        } => {
            init_logging(log_format);
            let (policy, mut deployment) = match load(&config) {
                Ok(loaded) => loaded,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let store_url = match store_url.as_deref().map(parse_store_url) {
                None => None,
                Some(Ok(url)) => Some(url),
                Some(Err(e)) => {
                    eprintln!("--store-url: {e}");
                    return ExitCode::from(2);
                }
            };
            // The command line beats the file; reloads compare with the file.
            let started = deployment.clone();
            if let Some(url) = store_url {
                deployment.store.url = url;
            }
            deployment.listen = listen.unwrap_or(deployment.listen);
            deployment.control_listen = control_listen.unwrap_or(deployment.control_listen);
            if let Some(e) = &mut deployment.envoy {
                e.grpc_listen = grpc_listen.unwrap_or(e.grpc_listen);
            } else if grpc_listen.is_some() {
                eprintln!("sluice: --grpc-listen needs an [envoy] table in the config");
                return ExitCode::from(2);
            }
            exit_code(serve(Origin::File(config), policy, deployment, started))
        }
    }
}

/// How serving ended, as the process's exit status.
fn exit_code(served: anyhow::Result<()>) -> ExitCode {
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `sluice envoy-ratelimit`: the environment's config, served.
fn run_envoy_ratelimit() -> ExitCode {
    let (from_env, policy, deployment) = match envoy_ratelimit::load() {
        Ok(loaded) => loaded,
        Err(e) => {
            eprintln!("sluice envoy-ratelimit: {e:#}");
            return ExitCode::from(2);
        }
    };
    let started = deployment.clone();
    exit_code(serve(
        Origin::Environment(from_env),
        policy,
        deployment,
        started,
    ))
}

/// `sluice validate`: the config file, and the Envoy YAML it names.
fn validate(config: &std::path::Path) -> ExitCode {
    match load(config) {
        Ok((policy, deployment)) => {
            if let Some(e) = &deployment.envoy {
                let store = sluice_store::MemoryStore::new(Default::default());
                if let Err(err) = sluice_envoy::Rules::load_all(
                    &e.configs,
                    &store,
                    &sluice_envoy::Loading {
                        algorithm: e.algorithm,
                        merge_domains: e.merge_domains,
                        shadow_mode: e.shadow_mode,
                    },
                ) {
                    eprintln!("{err}");
                    return ExitCode::from(2);
                }
            }
            println!(
                "{}: ok ({} limits)",
                config.display(),
                policy.limits().len()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(2)
        }
    }
}

fn init_logging(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_env("SLUICE_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Reads a config file once: its policy and its deployment.
fn load(path: &std::path::Path) -> Result<(Policy, Deployment), sluice_policy::ConfigError> {
    let source = sluice_policy::Source::read(path)?;
    let config = source.parse()?;
    // The deployment first: a policy compiled keeps its limits' labels.
    let deployment = Deployment::compile(&source, &config)?;
    Ok((Policy::compile(&source, &config)?, deployment))
}

/// Where the config came from.
enum Origin {
    /// A file, reloaded when it changes.
    File(PathBuf),
    /// The environment (`sluice envoy-ratelimit`), read once.
    Environment(envoy_ratelimit::FromEnv),
}

/// Serves until a stop signal, on a runtime of its own. Once the servers
/// have stopped, work still running on the runtime's blocking threads (a
/// reload, say) is given a moment and then left behind: the process
/// exits, whatever it was doing.
fn serve(
    origin: Origin,
    policy: Policy,
    deployment: Deployment,
    started: Deployment,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve_until_stopped(origin, policy, deployment, started));
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    served
}

async fn serve_until_stopped(
    origin: Origin,
    policy: Policy,
    deployment: Deployment,
    started: Deployment,
) -> anyhow::Result<()> {
    let engine = Arc::new(engine_for(policy, &deployment.store).await?);
    // With Redis, runtime plans and credits changed through any instance
    // apply here within a poll.
    engine.watch_runtime_state(RUNTIME_POLL);
    let reloader = Arc::new(match &origin {
        Origin::File(path) => Reloader::new(engine.clone(), path.clone(), started),
        Origin::Environment(env) => Reloader::without_file(engine.clone(), started, &env.toml),
    });
    let rls = match &deployment.envoy {
        None => None,
        Some(e) => Some(envoy::service(e, &engine, reloader.counts()).await?),
    };
    let rule_stats = rls.as_ref().map(|r| r.service.stats().clone());
    let mut servers = http_servers(&engine, &deployment, &reloader, rule_stats).await?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    // The reference server's mode: its HTTP API on the data listener.
    if let (Origin::Environment(env), Some(r)) = (&origin, &rls) {
        let app = envoy_ratelimit::http_api(env, &engine, &r.service, stop_rx.clone());
        servers = servers.with_data_app(app);
    }
    signals::spawn_reload_triggers(
        reloader,
        rls.as_ref().and_then(|r| r.rules.clone()),
        rls.as_ref().and_then(|r| r.tls.clone()),
    );
    let (data, control) = (servers.data_addr()?, servers.control_addr()?);
    match &deployment.upstream {
        Some(u) => tracing::info!(%data, %control, upstream = %u, "sluice proxying"),
        None => tracing::info!(%data, %control, "sluice serving"),
    }
    // Listen for the stop signals before announcing readiness: a signal
    // sent as soon as the line below is out must stop Sluice gracefully,
    // not kill it.
    let shutdown = signals::shutdown_signal();
    let grpc = match rls {
        None => None,
        Some(rls) => Some(envoy::spawn(rls, stop_rx.clone())?),
    };
    // A plain line that tests and scripts can wait for.
    match &grpc {
        Some((addr, _)) => {
            eprintln!("sluice: listening data=http://{data} control=http://{control} grpc={addr}")
        }
        None => eprintln!("sluice: listening data=http://{data} control=http://{control}"),
    }
    let stopped = async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    };
    let timeout = deployment.server.shutdown_timeout;
    signals::serve_until(
        servers,
        grpc.map(|(_, task)| task),
        stopped,
        stop_rx,
        timeout,
    )
    .await?;
    tracing::info!("sluice stopped");
    Ok(())
}

/// An admin token shorter than this is warned about at start.
const MIN_ADMIN_TOKEN_CHARS: usize = 16;

/// The data plane and the control API, bound, with metrics, the status
/// page's config version, connection caps that fit in the open files the
/// hard limit allows, and the admin routes when `SLUICE_ADMIN_TOKEN` is
/// set.
async fn http_servers(
    engine: &Arc<Engine>,
    deployment: &Deployment,
    reloader: &Arc<Reloader>,
    rule_stats: Option<Arc<sluice_envoy::stats::RuleStats>>,
) -> anyhow::Result<sluice_http::Servers> {
    let mut metrics = Metrics::new(engine, Some(reloader.clone()));
    if let Some(stats) = rule_stats {
        metrics = metrics.with_collector(sluice_envoy::stats::StatsCollector(stats));
    }
    let metrics = Arc::new(metrics);
    let (listen, control_listen) = (deployment.listen, deployment.control_listen);
    let mut servers = sluice_http::serve(engine.clone(), deployment)
        .await
        .with_context(|| format!("cannot bind {listen} and {control_listen}"))?
        .with_metrics(metrics)
        .with_reloader(reloader.clone());
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) => servers = servers.with_descriptor_limit(n),
        Err(e) => tracing::warn!(error = %e, "cannot read the open-file limit"),
    }
    if control_listen.ip().is_unspecified() {
        tracing::warn!(
            %control_listen,
            "control_listen binds to every address: /v1/check and /v1/auth spend real quotas and /metrics shows traffic; bind it to loopback or a private address, or firewall it"
        );
    }
    match std::env::var("SLUICE_ADMIN_TOKEN") {
        Ok(token) if !token.trim().is_empty() => {
            if token.trim().chars().count() < MIN_ADMIN_TOKEN_CHARS {
                tracing::warn!(
                    "SLUICE_ADMIN_TOKEN is shorter than {MIN_ADMIN_TOKEN_CHARS} characters: use a long random token (e.g. `openssl rand -hex 32`)"
                );
            }
            servers = servers.with_admin(Admin {
                engine: engine.clone(),
                token: token.trim().into(),
                reloader: reloader.clone(),
            });
        }
        _ => tracing::info!("SLUICE_ADMIN_TOKEN is not set: the admin routes are off"),
    }
    Ok(servers)
}

/// The engine over the configured store: the one place a store URL turns
/// into a store. With Redis, it first tries to connect for a moment; if
/// Redis is not there yet, Sluice starts anyway on the fallback and
/// connects in the background. Once connected, a node whose
/// `maxmemory-policy` can evict Sluice's keys refuses the start, unless
/// `[store] accept_eviction`; the policies are read again periodically.
/// Keys are then named by a hasher keyed by `SLUICE_KEY_SECRET`, which
/// every instance shares.
async fn engine_for(policy: Policy, store: &StoreSettings) -> anyhow::Result<Engine> {
    let Some(url) = store.url.clone() else {
        return Ok(Engine::in_memory(policy, store.max_keys));
    };
    let shared = sluice_redis::shared(url.clone(), store.batch, store.shared.clone());
    match shared.connect(std::time::Duration::from_secs(2)).await {
        Ok(()) => {
            tracing::info!(store = %url, "limits are shared in Redis");
            let start = sluice_redis::eviction::Phase::Start;
            shared
                .remote()
                .check_eviction(store.accept_eviction, start)
                .await?;
        }
        Err(e @ sluice_redis::RemoteError::Misconfigured(_)) => tracing::error!(
            store = %url,
            error = %e,
            fallback = store.shared.fallback.name(),
            "cannot use Redis until its configuration is fixed: starting on the fallback, trying again in the background"
        ),
        Err(e) => tracing::warn!(
            store = %url,
            error = %e,
            fallback = store.shared.fallback.name(),
            "cannot reach Redis yet: starting on the fallback, connecting in the background"
        ),
    }
    let hasher = match std::env::var("SLUICE_KEY_SECRET") {
        Ok(secret) if !secret.is_empty() => KeyHasher::from_secret(secret.as_bytes()),
        _ => {
            tracing::warn!(
                "SLUICE_KEY_SECRET is not set: Redis key names use a built-in hashing key; set a secret shared by every instance"
            );
            KeyHasher::from_secret(DEFAULT_KEY_SECRET)
        }
    };
    shared
        .remote()
        .watch_eviction(store.eviction_check_interval, store.accept_eviction);
    let runtime = Arc::new(RuntimeState::new(shared.remote().clone()));
    let wait = store.shared.timeout;
    Ok(Engine::on(
        policy,
        shared,
        runtime,
        hasher,
        sluice_core::SystemClock::new(),
    )
    .with_credit_wait(wait))
}

/// How often an instance on Redis checks for runtime plan and credit
/// changes (one `MGET`; the state is reloaded only when it changed).
const RUNTIME_POLL: std::time::Duration = std::time::Duration::from_millis(250);

/// The hashing key of Redis key names when `SLUICE_KEY_SECRET` is not set.
/// Instances must agree on it; it is public, so set your own.
const DEFAULT_KEY_SECRET: &[u8] = b"sluice-default-key-secret; set SLUICE_KEY_SECRET";
