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
    /// The Redis URL, completed by `REDIS_TLS_CACERT` and
    /// `REDIS_SENTINEL_AUTH` (or Sluice's own `SLUICE_REDIS_CA_FILE` and
    /// `SLUICE_REDIS_SENTINEL_PASSWORD`): it replaces the config's, whose
    /// text holds neither. None for the memory store.
    pub store_url: Option<sluice_store_url::StoreUrl>,
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

    /// A host, bracketed when it is an IPv6 address.
    fn host(&self, name: &str, default: &str) -> Result<String, EnvError> {
        let h = self.or(name, default).trim();
        if h.is_empty() || h.contains(['/', ' ']) {
            return Err(self.bad(name, "not a host address"));
        }
        Ok(if h.contains(':') && !h.starts_with('[') {
            format!("[{h}]")
        } else {
            h.to_owned()
        })
    }

    /// `host:port` from two variables.
    fn addr(
        &self,
        host: &str,
        host_default: &str,
        port: &str,
        port_default: u16,
    ) -> Result<String, EnvError> {
        Ok(format!(
            "{}:{}",
            self.host(host, host_default)?,
            self.port(port, port_default)?
        ))
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
mod envoy;
mod store;
mod variables;

/// Every variable of the reference server's settings, read or ignored:
/// what `docs/envoy.md`'s table covers.
pub fn known_variables() -> impl Iterator<Item = &'static str> {
    variables::READ
        .iter()
        .copied()
        .chain(variables::IGNORED.iter().map(|(name, _)| *name))
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
        let warnings = warnings(&v);
        let mut toml = String::from("# Made by `sluice envoy-ratelimit` from the environment.\n");
        if v.get("GRPC_UDS").is_some_and(|s| !s.is_empty()) {
            return Err(v.bad(
                "GRPC_UDS",
                "Sluice serves gRPC on TCP only: unset it and use GRPC_HOST and GRPC_PORT",
            ));
        }
        let _ = writeln!(
            toml,
            "listen = {}",
            quoted(&v.addr("HOST", "0.0.0.0", "PORT", 8080)?)
        );
        let _ = writeln!(
            toml,
            "control_listen = {}",
            quoted(&v.addr("DEBUG_HOST", "0.0.0.0", "DEBUG_PORT", 6070)?)
        );
        let (log_level, log_json) = log(&v)?;
        let (store, store_url) = store::store(&v)?;
        let redis = store_url.is_some();
        toml.push_str(&store);
        toml.push_str(&envoy::envoy(
            &v,
            &v.addr("GRPC_HOST", "0.0.0.0", "GRPC_PORT", 8081)?,
        )?);
        let health = HealthSettings {
            needs_config: v.flag("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", false)?,
            redis,
            redis_active_check: redis && v.flag("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", false)?,
        };
        Ok(Self {
            toml,
            store_url,
            health,
            log_level,
            log_json,
            warnings,
        })
    }
}

/// One line per variable that was set but has no effect in Sluice.
fn warnings(v: &Vars) -> Vec<String> {
    let mut warnings = Vec::new();
    for (name, why) in variables::IGNORED {
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
    warnings
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
#[cfg(test)]
mod tests;
