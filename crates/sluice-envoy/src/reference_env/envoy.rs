//! `[envoy]`, from the rules, answer, TLS and xDS variables.

use std::fmt::Write as _;

use super::{EnvError, Vars, quoted};

/// `[envoy]`.
pub(super) fn envoy(v: &Vars, grpc: &str) -> Result<String, EnvError> {
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
