//! The reference server's deployment: envoyproxy/ratelimit is configured
//! by its environment alone (`RUNTIME_ROOT`, `REDIS_URL`, `GRPC_PORT`, …),
//! and `sluice envoy-ratelimit` is configured the same way, so that a
//! Deployment written for it needs only its image changed.
//!
//! [`ReferenceEnv::read`] takes the environment's variables and gives the
//! Sluice config they mean (a TOML text, compiled by the usual path), what
//! the HTTP health check must watch, the log settings, and a warning for
//! each variable that has no meaning in Sluice. A value Sluice cannot honour
//! (a unix socket, a second Redis for per-second limits, memcached) is an
//! error that names the variable; nothing is silently dropped. The table
//! of every variable and what Sluice does with it is in `docs/envoy.md`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A variable whose value Sluice cannot honour.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{variable}={value:?}: {message}")]
pub struct EnvError {
    /// The variable's name.
    pub variable: String,
    /// Its value (a secret's is shown as `***`).
    pub value: String,
    /// Why, and what to do instead.
    pub message: String,
}

/// What the environment configures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceEnv {
    /// The Sluice config, as TOML: the listeners, the store, `[envoy]`.
    pub toml: String,
    /// What `/healthcheck` watches.
    pub health: HealthSettings,
    /// `LOG_LEVEL`, as a tracing filter directive (`warn`, `debug`, …).
    pub log_level: &'static str,
    /// `LOG_FORMAT=json`.
    pub log_json: bool,
    /// One line per variable that was set but has no effect in Sluice.
    pub warnings: Vec<String>,
}

/// What the reference server's `/healthcheck` depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthSettings {
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`: unhealthy until rules are
    /// in force.
    pub needs_config: bool,
    /// The backend is Redis: unhealthy until it has been reached once.
    pub redis: bool,
    /// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`: unhealthy whenever Redis
    /// cannot be reached, not only before the first connection.
    pub redis_active_check: bool,
}

/// The variables read, with their values, and those used so far.
struct Vars {
    all: BTreeMap<String, String>,
}

impl Vars {
    fn get(&self, name: &str) -> Option<&str> {
        self.all.get(name).map(String::as_str)
    }

    /// The value, or the reference server's default.
    fn or<'a>(&'a self, name: &str, default: &'a str) -> &'a str {
        self.get(name).unwrap_or(default)
    }

    fn bad(&self, name: &str, message: impl Into<String>) -> EnvError {
        let value = self.or(name, "");
        let secret = name.ends_with("_AUTH");
        EnvError {
            variable: name.into(),
            value: if secret { "***".into() } else { value.into() },
            message: message.into(),
        }
    }

    /// A boolean as Go's `strconv.ParseBool` reads it.
    fn flag(&self, name: &str, default: bool) -> Result<bool, EnvError> {
        match self.get(name) {
            None => Ok(default),
            Some("1" | "t" | "T" | "true" | "TRUE" | "True") => Ok(true),
            Some("0" | "f" | "F" | "false" | "FALSE" | "False") => Ok(false),
            Some(_) => Err(self.bad(name, "not a boolean (true or false)")),
        }
    }

    fn port(&self, name: &str, default: u16) -> Result<u16, EnvError> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .map_err(|_| self.bad(name, "not a port number (0 to 65535)")),
        }
    }
}

/// Variables that have no effect in Sluice when set: what to say about
/// each.
const IGNORED: &[(&str, &str)] = &[
    ("PROTO", "Sluice listens on TCP"),
    (
        "GRPC_MAX_CONNECTION_AGE",
        "Sluice keeps connections open and pings idle ones",
    ),
    (
        "GRPC_MAX_CONNECTION_AGE_GRACE",
        "Sluice keeps connections open and pings idle ones",
    ),
    (
        "REDIS_POOL_SIZE",
        "Sluice multiplexes its calls on a few connections",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        "Sluice batches concurrent calls by itself",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        "Sluice multiplexes its calls and never waits for a pooled connection",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        "Sluice starts at once on its local fallback and connects in the background",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        "Sluice's keys expire when their window does",
    ),
    (
        "CACHE_KEY_PREFIX",
        "Sluice names its keys by a keyed hash: deployments sharing one Redis keep apart with different SLUICE_KEY_SECRETs",
    ),
    ("NEAR_LIMIT_RATIO", "the near-limit statistic uses 0.8"),
    (
        "RUNTIME_WATCH_ROOT",
        "Sluice watches the config files themselves, whatever replaces them",
    ),
    (
        "RUNTIME_IGNOREDOTFILES",
        "Sluice always skips dot files (and Kubernetes' ..data entries)",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        "Sluice always starts, answering OK until the first rules come",
    ),
    (
        "XDS_CLIENT_BACKOFF_INITIAL_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_MAX_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_RANDOM_FACTOR",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_BACKOFF_JITTER",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
        "Sluice reconnects with its own backoff (1 s to 30 s)",
    ),
    (
        "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES",
        "Sluice takes xDS messages of up to 16 MiB",
    ),
    (
        "USE_STATSD",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATSD_HOST",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATSD_PORT",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "USE_DOG_STATSD",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "EXTRA_TAGS",
        "Sluice has no statsd sink: scrape /metrics on the debug port",
    ),
    (
        "STATS_FLUSH_INTERVAL",
        "Sluice's metrics are read when scraped",
    ),
    (
        "DISABLE_STATS",
        "Sluice's metrics cost nothing until scraped",
    ),
    (
        "USE_PROMETHEUS",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_ADDR",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_PATH",
        "Sluice serves its metrics on the debug port, at /metrics",
    ),
    (
        "PROMETHEUS_MAPPER_YAML",
        "Sluice's metrics have their own names (docs/observability.md)",
    ),
    (
        "PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS",
        "Sluice's metrics have their own names (docs/observability.md)",
    ),
    ("TRACING_ENABLED", "Sluice does not export traces"),
    ("TRACING_SERVICE_NAME", "Sluice does not export traces"),
    ("TRACING_SERVICE_NAMESPACE", "Sluice does not export traces"),
    (
        "TRACING_SERVICE_INSTANCE_ID",
        "Sluice does not export traces",
    ),
    ("TRACING_EXPORTER_PROTOCOL", "Sluice does not export traces"),
    ("TRACING_SAMPLING_RATE", "Sluice does not export traces"),
    ("MEMCACHE_HOST_PORT", "the backend is Redis"),
    ("MEMCACHE_MAX_IDLE_CONNS", "the backend is Redis"),
    ("MEMCACHE_SRV", "the backend is Redis"),
    ("MEMCACHE_SRV_REFRESH", "the backend is Redis"),
    ("MEMCACHE_TLS", "the backend is Redis"),
    ("MEMCACHE_TLS_CLIENT_CERT", "the backend is Redis"),
    ("MEMCACHE_TLS_CLIENT_KEY", "the backend is Redis"),
    ("MEMCACHE_TLS_CACERT", "the backend is Redis"),
    (
        "MEMCACHE_TLS_SKIP_HOSTNAME_VERIFICATION",
        "the backend is Redis",
    ),
    ("REDIS_PERSECOND_SOCKET_TYPE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_TYPE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_URL", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_POOL_SIZE", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_AUTH", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_TLS", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_SENTINEL_AUTH", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_PIPELINE_WINDOW", "REDIS_PERSECOND is off"),
    ("REDIS_PERSECOND_PIPELINE_LIMIT", "REDIS_PERSECOND is off"),
    (
        "REDIS_PERSECOND_CLUSTER_PIPELINE_PARALLELISM",
        "REDIS_PERSECOND is off",
    ),
    ("REDIS_PERSECOND_TIMEOUT", "REDIS_PERSECOND is off"),
    (
        "REDIS_PERSECOND_POOL_ON_EMPTY_BEHAVIOR",
        "REDIS_PERSECOND is off",
    ),
];

/// The variables read for their meaning (besides [`IGNORED`]).
const READ: &[&str] = &[
    "HOST",
    "PORT",
    "DEBUG_HOST",
    "DEBUG_PORT",
    "GRPC_HOST",
    "GRPC_PORT",
    "GRPC_UDS",
    "GRPC_SERVER_USE_TLS",
    "GRPC_SERVER_TLS_CERT",
    "GRPC_SERVER_TLS_KEY",
    "GRPC_CLIENT_TLS_CACERT",
    "GRPC_CLIENT_TLS_SAN",
    "LOG_LEVEL",
    "LOG_FORMAT",
    "CONFIG_TYPE",
    "CONFIG_GRPC_XDS_NODE_ID",
    "CONFIG_GRPC_XDS_NODE_METADATA",
    "CONFIG_GRPC_XDS_SERVER_URL",
    "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
    "CONFIG_GRPC_XDS_SERVER_USE_TLS",
    "CONFIG_GRPC_XDS_CLIENT_TLS_CERT",
    "CONFIG_GRPC_XDS_CLIENT_TLS_KEY",
    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
    "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    "RUNTIME_ROOT",
    "RUNTIME_SUBDIRECTORY",
    "RUNTIME_APPDIRECTORY",
    "LOCAL_CACHE_SIZE_IN_BYTES",
    "BACKEND_TYPE",
    "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    "LIMIT_RESPONSE_HEADERS_ENABLED",
    "LIMIT_LIMIT_HEADER",
    "LIMIT_REMAINING_HEADER",
    "LIMIT_RESET_HEADER",
    "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED",
    "REDIS_SOCKET_TYPE",
    "REDIS_TYPE",
    "REDIS_URL",
    "REDIS_AUTH",
    "REDIS_SENTINEL_AUTH",
    "REDIS_TLS",
    "REDIS_TLS_CLIENT_CERT",
    "REDIS_TLS_CLIENT_KEY",
    "REDIS_TLS_CACERT",
    "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
    "REDIS_TIMEOUT",
    "REDIS_PERSECOND",
    "SHADOW_MODE",
    "QUOTA_MODE",
    "RESPONSE_DYNAMIC_METADATA",
    "MERGE_DOMAIN_CONFIG",
];

/// Every variable of the reference server's settings, read or ignored:
/// what `docs/envoy.md`'s table covers.
pub fn known_variables() -> impl Iterator<Item = &'static str> {
    READ.iter()
        .copied()
        .chain(IGNORED.iter().map(|(name, _)| *name))
}

impl ReferenceEnv {
    /// Reads the reference server's variables among `vars` (others are
    /// left alone: `SLUICE_KEY_SECRET`, `PATH`, …).
    pub fn read(vars: impl IntoIterator<Item = (String, String)>) -> Result<Self, EnvError> {
        let known: Vec<&str> = known_variables().collect();
        let v = Vars {
            all: vars
                .into_iter()
                .filter(|(k, _)| known.contains(&k.as_str()))
                .collect(),
        };
        let mut warnings = Vec::new();
        for (name, why) in IGNORED {
            if let Some(value) = v.get(name) {
                // The reference server's defaults that are set anyway
                // change nothing either way.
                let default_off = matches!(
                    *name,
                    "USE_STATSD"
                        | "USE_PROMETHEUS"
                        | "TRACING_ENABLED"
                        | "DISABLE_STATS"
                        | "USE_DOG_STATSD"
                ) && v.flag(name, false) == Ok(false);
                if !default_off {
                    warnings.push(format!("{name}={value:?} has no effect: {why}"));
                }
            }
        }
        if v.get("USE_STATSD").is_none() {
            warnings.push(
                "USE_STATSD is on by default in the reference server; Sluice has no statsd sink: scrape /metrics on the debug port".into(),
            );
        }
        let mut toml = String::from("# Made by `sluice envoy-ratelimit` from the environment.\n");
        let host = |name: &str, default: &'static str| -> Result<String, EnvError> {
            let h = v.or(name, default).trim();
            if h.is_empty() || h.contains(['/', ' ']) {
                return Err(v.bad(name, "not a host address"));
            }
            // An IPv6 address is bracketed in a socket address.
            Ok(if h.contains(':') && !h.starts_with('[') {
                format!("[{h}]")
            } else {
                h.to_owned()
            })
        };
        if let Some(uds) = v.get("GRPC_UDS").filter(|s| !s.is_empty()) {
            let _ = uds;
            return Err(v.bad(
                "GRPC_UDS",
                "Sluice serves gRPC on TCP only: unset it and use GRPC_HOST and GRPC_PORT",
            ));
        }
        let addr = |h: &str, hv: &'static str, p: &str, pv: u16| -> Result<String, EnvError> {
            Ok(format!("{}:{}", host(h, hv)?, v.port(p, pv)?))
        };
        let _ = writeln!(
            toml,
            "listen = {}",
            quoted(&addr("HOST", "0.0.0.0", "PORT", 8080)?)
        );
        let _ = writeln!(
            toml,
            "control_listen = {}",
            quoted(&addr("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", 6070)?)
        );
        let (log_level, log_json) = log(&v)?;
        let (store, redis) = store(&v)?;
        toml.push_str(&store);
        toml.push_str(&envoy(
            &v,
            &addr("GRPC_HOST", "0.0.0.0", "GRPC_PORT", 8081)?,
        )?);
        let health = HealthSettings {
            needs_config: v.flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            redis,
            redis_active_check: redis && v.flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
        };
        Ok(Self {
            toml,
            health,
            log_level,
            log_json,
            warnings,
        })
    }
}

/// A TOML basic string.
fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn log(v: &Vars) -> Result<(&'static str, bool), EnvError> {
    let level = match v.or("LOG_LEVEL", "WARN").to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        _ => {
            return Err(v.bad(
                "LOG_LEVEL",
                "not a level: trace, debug, info, warn, error, fatal or panic",
            ));
        }
    };
    let json = match v.or("LOG_FORMAT", "text").to_ascii_lowercase().as_str() {
        "text" => false,
        "json" => true,
        _ => return Err(v.bad("LOG_FORMAT", "not a format: text or json")),
    };
    Ok((level, json))
}

/// `[store]`, and whether it is Redis.
fn store(v: &Vars) -> Result<(String, bool), EnvError> {
    match v.or("BACKEND_TYPE", "redis").to_ascii_lowercase().as_str() {
        "redis" => {}
        // Sluice's own: one instance, counting in its memory.
        "memory" => return Ok(("[store]\nurl = \"memory://\"\n".into(), false)),
        "memcache" => {
            return Err(v.bad(
                "BACKEND_TYPE",
                "Sluice keeps its counters in Redis (or, for one instance, in memory: BACKEND_TYPE=memory), not in memcached",
            ));
        }
        _ => return Err(v.bad("BACKEND_TYPE", "not a backend: redis, or Sluice's memory")),
    }
    if v.flag("REDIS_PERSECOND", false)? {
        return Err(v.bad(
            "REDIS_PERSECOND",
            "Sluice keeps every limit in one Redis deployment: unset it (a Cluster spreads the load instead)",
        ));
    }
    if !v
        .or("REDIS_SOCKET_TYPE", "unix")
        .eq_ignore_ascii_case("tcp")
    {
        return Err(v.bad(
            "REDIS_SOCKET_TYPE",
            "Sluice reaches Redis over TCP, not a unix socket (the reference server's default): set REDIS_SOCKET_TYPE=tcp and REDIS_URL=host:port",
        ));
    }
    for name in ["REDIS_TLS_CLIENT_CERT", "REDIS_TLS_CLIENT_KEY"] {
        if v.get(name).is_some_and(|s| !s.is_empty()) {
            return Err(v.bad(
                name,
                "Sluice does not present a client certificate to Redis yet",
            ));
        }
    }
    if v.flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", false)? {
        return Err(v.bad(
            "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
            "Sluice always verifies Redis's certificate: give its CA in SLUICE_REDIS_CA_FILE",
        ));
    }
    if v.get("REDIS_TLS_CACERT").is_some_and(|s| !s.is_empty()) {
        return Err(v.bad(
            "REDIS_TLS_CACERT",
            "name the CA file in SLUICE_REDIS_CA_FILE instead (Sluice reads it there, for every mode)",
        ));
    }
    if v.get("REDIS_SENTINEL_AUTH").is_some_and(|s| !s.is_empty()) {
        return Err(v.bad(
            "REDIS_SENTINEL_AUTH",
            "give the Sentinels' password in SLUICE_REDIS_SENTINEL_PASSWORD instead",
        ));
    }
    let tls = v.flag("REDIS_TLS", false)?;
    let url = v
        .or("REDIS_URL", "/var/run/nutcracker/ratelimit.sock")
        .trim();
    if url.contains("://") || url.starts_with('/') {
        return Err(v.bad(
            "REDIS_URL",
            "expected host:port (several, comma-separated, for a Cluster or Sentinels)",
        ));
    }
    let auth = match v.get("REDIS_AUTH").filter(|a| !a.is_empty()) {
        None => String::new(),
        // `user:password`, or a password alone.
        Some(a) => match a.split_once(':') {
            Some((user, pass)) => format!("{}:{}@", percent(user), percent(pass)),
            None => format!(":{}@", percent(a)),
        },
    };
    let s = if tls { "s" } else { "" };
    let url = match v.or("REDIS_TYPE", "SINGLE").to_ascii_uppercase().as_str() {
        "SINGLE" => {
            if url.contains(',') {
                return Err(v.bad("REDIS_URL", "REDIS_TYPE=SINGLE takes one host:port"));
            }
            format!("redis{s}://{auth}{url}")
        }
        "CLUSTER" => format!("redis{s}+cluster://{auth}{url}"),
        "SENTINEL" => {
            // `master-name,sentinel1:port,sentinel2:port`
            let mut parts = url.split(',');
            let master = parts.next().unwrap_or_default();
            let sentinels: Vec<&str> = parts.collect();
            if master.is_empty() || sentinels.is_empty() {
                return Err(v.bad(
                    "REDIS_URL",
                    "REDIS_TYPE=SENTINEL takes master-name,host:port[,host:port…]",
                ));
            }
            format!(
                "redis{s}+sentinel://{auth}{}/{}",
                sentinels.join(","),
                percent(master)
            )
        }
        _ => return Err(v.bad("REDIS_TYPE", "not a type: SINGLE, CLUSTER or SENTINEL")),
    };
    // Checked as the config will check it, to name the variable.
    if let Err(e) = url.parse::<sluice_store_url::StoreUrl>() {
        return Err(v.bad("REDIS_URL", e.to_string()));
    }
    let mut toml = format!("[store]\nurl = {}\n", quoted(&url));
    if let Some(t) = v.get("REDIS_TIMEOUT") {
        let _ = writeln!(
            toml,
            "timeout = {}",
            quoted(&go_duration(v, "REDIS_TIMEOUT", t)?)
        );
    }
    let cache = v
        .or("LOCAL_CACHE_SIZE_IN_BYTES", "0")
        .trim()
        .parse::<u64>()
        .map_err(|_| v.bad("LOCAL_CACHE_SIZE_IN_BYTES", "not a whole number of bytes"))?;
    let _ = writeln!(toml, "over_limit_cache = {}", cache > 0);
    Ok((toml, true))
}

/// A Go duration (`10s`, `1m30s`, `250ms`) as Sluice's config takes one.
fn go_duration(v: &Vars, name: &str, text: &str) -> Result<String, EnvError> {
    let t = text.trim();
    let bad = || v.bad(name, "not a duration such as 10s, 500ms or 1m");
    // Sluice reads one number and one unit; the common Go forms are that.
    let split = t.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = t.split_at(split);
    if n.is_empty() || !matches!(unit, "ms" | "s" | "m" | "h") {
        return Err(bad());
    }
    Ok(t.to_owned())
}

/// Percent-encodes what a URL's user part cannot hold as is.
fn percent(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `[envoy]`.
fn envoy(v: &Vars, grpc: &str) -> Result<String, EnvError> {
    let mut t = String::from("[envoy]\ncompat = true\nalgorithm = \"fixed_window\"\n");
    let _ = writeln!(t, "grpc_listen = {}", quoted(grpc));
    let _ = writeln!(
        t,
        "merge_domains = {}",
        v.flag("MERGE_DOMAIN_CONFIG", false)?
    );
    let _ = writeln!(
        t,
        "response_dynamic_metadata = {}",
        v.flag("RESPONSE_DYNAMIC_METADATA", false)?
    );
    let _ = writeln!(
        t,
        "response_headers = {}",
        v.flag("LIMIT_RESPONSE_HEADERS_ENABLED", false)?
    );
    for (name, default) in [
        ("LIMIT_LIMIT_HEADER", "RateLimit-Limit"),
        ("LIMIT_REMAINING_HEADER", "RateLimit-Remaining"),
        ("LIMIT_RESET_HEADER", "RateLimit-Reset"),
    ] {
        if !v.or(name, default).eq_ignore_ascii_case(default) {
            return Err(v.bad(name, format!("Sluice sends the header as {default} only")));
        }
    }
    let _ = writeln!(t, "shadow_mode = {}", v.flag("SHADOW_MODE", false)?);
    if v.flag("QUOTA_MODE", false)? {
        return Err(v.bad("QUOTA_MODE", "not supported yet"));
    }
    if v.flag("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", false)? {
        return Err(v.bad(
            "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
            "not supported yet: Sluice's compat mode counts as the reference server does by default (false)",
        ));
    }
    match v.or("CONFIG_TYPE", "FILE").to_ascii_uppercase().as_str() {
        "FILE" => {
            let mut dir =
                std::path::PathBuf::from(v.or("RUNTIME_ROOT", "/srv/runtime_data/current"));
            dir.push(v.or("RUNTIME_SUBDIRECTORY", ""));
            dir.push(v.or("RUNTIME_APPDIRECTORY", "config"));
            let dir = dir.to_string_lossy().into_owned();
            let _ = writeln!(t, "config = {}", quoted(&dir));
        }
        "GRPC_XDS_SOTW" => t.push_str(&xds(v)?),
        _ => return Err(v.bad("CONFIG_TYPE", "not a type: FILE or GRPC_XDS_SOTW")),
    }
    if v.flag("GRPC_SERVER_USE_TLS", false)? {
        let file = |name: &str| -> Result<String, EnvError> {
            match v.get(name).filter(|s| !s.is_empty()) {
                Some(path) => Ok(quoted(path)),
                None => Err(v.bad(name, "GRPC_SERVER_USE_TLS needs it")),
            }
        };
        let _ = write!(
            t,
            "[envoy.tls]\ncert = {}\nkey = {}\n",
            file("GRPC_SERVER_TLS_CERT")?,
            file("GRPC_SERVER_TLS_KEY")?
        );
        if let Some(ca) = v.get("GRPC_CLIENT_TLS_CACERT").filter(|s| !s.is_empty()) {
            let _ = writeln!(t, "client_ca = {}", quoted(ca));
        }
        if v.get("GRPC_CLIENT_TLS_SAN").is_some_and(|s| !s.is_empty()) {
            return Err(v.bad(
                "GRPC_CLIENT_TLS_SAN",
                "not supported yet: Sluice accepts any client certificate its CA signed",
            ));
        }
    }
    Ok(t)
}

/// `[envoy.xds]`.
fn xds(v: &Vars) -> Result<String, EnvError> {
    for name in [
        "CONFIG_GRPC_XDS_NODE_METADATA",
        "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
        "CONFIG_GRPC_XDS_SERVER_TLS_SAN",
    ] {
        if v.get(name).is_some_and(|s| !s.is_empty()) {
            return Err(v.bad(name, "not supported yet"));
        }
    }
    let tls = v.flag("CONFIG_GRPC_XDS_SERVER_USE_TLS", false)?;
    let server = v.or("CONFIG_GRPC_XDS_SERVER_URL", "localhost:18000").trim();
    if server.contains("://") {
        return Err(v.bad("CONFIG_GRPC_XDS_SERVER_URL", "expected host:port"));
    }
    let scheme = if tls { "https" } else { "http" };
    let mut t = format!(
        "[envoy.xds]\nserver = {}\nnode_id = {}\n",
        quoted(&format!("{scheme}://{server}")),
        quoted(v.or("CONFIG_GRPC_XDS_NODE_ID", "default"))
    );
    if tls {
        match v
            .get("CONFIG_GRPC_XDS_SERVER_TLS_CACERT")
            .filter(|s| !s.is_empty())
        {
            Some(ca) => {
                let _ = writeln!(t, "ca = {}", quoted(ca));
            }
            None => {
                return Err(v.bad(
                    "CONFIG_GRPC_XDS_SERVER_TLS_CACERT",
                    "Sluice needs the management server's CA over TLS",
                ));
            }
        }
        let cert = v
            .get("CONFIG_GRPC_XDS_CLIENT_TLS_CERT")
            .filter(|s| !s.is_empty());
        let key = v
            .get("CONFIG_GRPC_XDS_CLIENT_TLS_KEY")
            .filter(|s| !s.is_empty());
        if let (Some(c), Some(k)) = (cert, key) {
            let _ = write!(t, "cert = {}\nkey = {}\n", quoted(c), quoted(k));
        }
    }
    Ok(t)
}

#[cfg(test)]
mod tests;
