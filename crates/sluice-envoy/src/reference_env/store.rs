//! `[store]`, from the backend and Redis variables.

use std::fmt::Write as _;

use super::{EnvError, Vars, quoted};

/// `[store]`, and the Redis URL it names, completed by the environment
/// (none for the memory store).
pub(super) fn store(v: &Vars) -> Result<(String, Option<sluice_store_url::StoreUrl>), EnvError> {
    match v.or("BACKEND_TYPE", "redis").to_ascii_lowercase().as_str() {
        "redis" => {}
        // Sluice's own: one instance, counting in its memory.
        "memory" => return Ok(("[store]\nurl = \"memory://\"\n".into(), None)),
        "memcache" => {
            return Err(v.bad(
                "BACKEND_TYPE",
                "Sluice keeps its counters in Redis (or, for one instance, in memory: BACKEND_TYPE=memory), not in memcached",
            ));
        }
        _ => return Err(v.bad("BACKEND_TYPE", "not a backend: redis, or Sluice's memory")),
    }
    refuse_what_sluice_cannot_do(v)?;
    let url = redis_url(v)?;
    let store_url = completed(v, &url)?;
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
    Ok((toml, Some(store_url)))
}

/// The Redis settings Sluice cannot honour, refused by name.
fn refuse_what_sluice_cannot_do(v: &Vars) -> Result<(), EnvError> {
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
    Ok(())
}

/// The Redis URL the variables describe, as text (a password in it).
fn redis_url(v: &Vars) -> Result<String, EnvError> {
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
    Ok(url)
}

/// The URL, parsed and completed by the CA and the Sentinels' password.
fn completed(v: &Vars, url: &str) -> Result<sluice_store_url::StoreUrl, EnvError> {
    // The CA and the Sentinels' password complete the URL as Sluice's own
    // variables would (which stand when these are not set).
    let completing = |name: &str| {
        let from = match name {
            sluice_store_url::CA_FILE_ENV => "REDIS_TLS_CACERT",
            sluice_store_url::SENTINEL_PASSWORD_ENV => "REDIS_SENTINEL_AUTH",
            _ => "",
        };
        v.get(from)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .or_else(|| std::env::var(name).ok())
    };
    sluice_store_url::StoreUrl::parse_with_env(url, completing)
        .map_err(|e| v.bad("REDIS_URL", e.to_string()))
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
