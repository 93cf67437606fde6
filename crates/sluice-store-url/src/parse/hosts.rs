//! The host list: `host[:port]` and `[v6]:port` items, comma-separated.

/// The hosts and ports of the comma-separated `hostlist`, in order; a port
/// left out is `default_port`, and no node may be listed twice.
pub(super) fn parse_host_list(
    hostlist: &str,
    default_port: u16,
) -> Result<Vec<(String, u16)>, String> {
    let mut hosts = Vec::new();
    for item in hostlist.split(',') {
        let (host, port) = parse_host_port(item, default_port)?;
        if hosts.iter().any(|(h, p)| *h == host && *p == port) {
            return Err(format!("node `{item}` is listed twice"));
        }
        hosts.push((host, port));
    }
    Ok(hosts)
}

/// `host[:port]` or `[v6]:port`.
fn parse_host_port(item: &str, default_port: u16) -> Result<(String, u16), String> {
    if item.is_empty() {
        return Err("empty host (check for a stray `,` or a missing host)".into());
    }
    let (host, port) = match item.strip_prefix('[') {
        Some(v6) => split_bracketed(item, v6)?,
        None => match item.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (item, None),
        },
    };
    if host.is_empty() {
        return Err(format!("`{item}`: missing host"));
    }
    if !item.starts_with('[') && !is_host_name(host) {
        return Err(format!(
            "host `{host}` contains characters a host name cannot have"
        ));
    }
    let port = match port {
        None => default_port,
        Some(p) => parse_port(p, item)?,
    };
    Ok((host.to_owned(), port))
}

/// The IPv6 address and the port text (if any) of `item`, a bracketed
/// `[v6]` or `[v6]:port`; `v6` is `item` after its `[`.
fn split_bracketed<'a>(item: &str, v6: &'a str) -> Result<(&'a str, Option<&'a str>), String> {
    let Some((host, after)) = v6.split_once(']') else {
        return Err(format!("host `{item}`: missing `]`"));
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
    {
        return Err(format!("host `{item}` is not an IPv6 address"));
    }
    let port = match after {
        "" => None,
        p => match p.strip_prefix(':') {
            Some(p) => Some(p),
            None => return Err(format!("host `{item}`: unexpected text after `]`")),
        },
    };
    Ok((host, port))
}

/// Whether `host` has only the characters of a host name or an IPv4
/// address: ASCII letters and digits, `-`, `.` and `_`.
fn is_host_name(host: &str) -> bool {
    host.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// The port `p` of the host `item`: a number in 1..=65535.
fn parse_port(p: &str, item: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(port) if port != 0 => Ok(port),
        _ => Err(format!(
            "port `{p}` of `{item}` is not a number in 1..=65535"
        )),
    }
}
