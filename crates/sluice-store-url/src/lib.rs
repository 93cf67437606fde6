//! # sluice-store-url
//!
//! Store URLs: which Redis deployment holds the limiter state, parsed and
//! checked without a Redis client (the config validates them; the Redis
//! store connects to them).
//!
//! | URL | deployment |
//! |---|---|
//! | `redis://[user[:pass]@]host[:port][/db]` | one node |
//! | `rediss://…` | one node over TLS |
//! | `redis+cluster://[user[:pass]@]h1:p1,h2:p2,…` | Redis Cluster, seeded by these nodes (database 0 only) |
//! | `redis+shards://[user[:pass]@]h1:p1,h2:p2,…[/db]` | independent nodes; keys spread by consistent hashing |
//! | `redis+sentinel://[user[:pass]@]s1:p1,s2:p2,…/master-name[/db]` | the master that these Sentinels name |
//!
//! Each scheme has a TLS form with `rediss` in place of `redis`
//! (`rediss+cluster://`, `rediss+shards://`, `rediss+sentinel://`).
//!
//! Ports default to 6379 (26379 for Sentinels). Hosts are names, IPv4
//! addresses or bracketed IPv6 addresses (`[::1]:6379`). The user name and
//! password are percent-decoded, so a password with `@`, `:` or `/` is
//! written `%40`, `%3A`, `%2F`.
//!
//! **Passwords from the environment.** When the URL carries no password,
//! the environment variable `SLUICE_REDIS_PASSWORD` supplies it (so that a
//! configuration file need not hold the secret). For Sentinel URLs, the
//! URL's (or `SLUICE_REDIS_PASSWORD`'s) credentials are the *master's*; the
//! Sentinels themselves are contacted without a password unless
//! `SLUICE_REDIS_SENTINEL_PASSWORD` is set.
//!
//! **Redaction.** Neither `Display`, `Debug` nor a [`BadUrl`]
//! ever shows a password: it is printed as `***`.

use std::fmt;

/// A store URL that does not parse. The message never contains a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid store URL `{url}`: {reason}")]
pub struct BadUrl {
    /// The URL with any password replaced by `***`.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The environment variable that supplies the password when the URL has none.
pub const PASSWORD_ENV: &str = "SLUICE_REDIS_PASSWORD";

/// The environment variable that supplies the Sentinels' own password.
pub const SENTINEL_PASSWORD_ENV: &str = "SLUICE_REDIS_SENTINEL_PASSWORD";

/// The environment variable naming a PEM file of the certificate
/// authorities that `rediss://` nodes are checked against, instead of the
/// public web roots (for a Redis with a private CA).
pub const CA_FILE_ENV: &str = "SLUICE_REDIS_CA_FILE";

/// The default Redis port.
const REDIS_PORT: u16 = 6379;

/// The default Sentinel port.
const SENTINEL_PORT: u16 = 26379;

/// One Redis node's address and credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeAddr {
    /// Host name or IP.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Whether to use TLS (`rediss://`).
    pub tls: bool,
    /// ACL user name, if any.
    pub username: Option<String>,
    /// Password, if any (from the URL or the environment). Never printed.
    pub password: Option<String>,
    /// Database number (single node and shards only).
    pub db: i64,
}

impl NodeAddr {
    /// A plain-TCP node without credentials, database 0.
    pub fn new(host: impl Into<String>, port: u16) -> Self {
        Self {
            host: host.into(),
            port,
            tls: false,
            username: None,
            password: None,
            db: 0,
        }
    }

    /// `host:port` (IPv6 hosts bracketed).
    pub fn write_host_port(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl fmt::Debug for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NodeAddr")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("tls", &self.tls)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .finish()
    }
}

/// `host:port`, never the credentials.
impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_host_port(f)
    }
}

/// A parsed store URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// `redis://host:port/db` or `rediss://…`: one node.
    Single(NodeAddr),
    /// `redis+cluster://h1:p1,h2:p2`: Redis Cluster, seeded by these nodes.
    Cluster(Vec<NodeAddr>),
    /// `redis+shards://h1:p1,h2:p2`: independent nodes, keys spread by
    /// consistent hashing.
    Shards(Vec<NodeAddr>),
    /// `redis+sentinel://s1:p1,s2:p2/master-name`: the master that these
    /// Sentinels name.
    Sentinel {
        /// The Sentinels. Their `password` is the Sentinels' own (from
        /// `SLUICE_REDIS_SENTINEL_PASSWORD`), not the master's.
        sentinels: Vec<NodeAddr>,
        /// The monitored master's name.
        master: String,
        /// How to talk to the master once found: credentials, database, TLS.
        master_auth: MasterAuth,
    },
}

/// How to log in to a master that Sentinels name (its address comes from
/// the Sentinels).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct MasterAuth {
    /// ACL user name, if any.
    pub username: Option<String>,
    /// Password, if any. Never printed.
    pub password: Option<String>,
    /// Database number.
    pub db: i64,
    /// Whether to use TLS.
    pub tls: bool,
}

impl MasterAuth {
    /// The master at `host:port`, with these settings.
    pub fn node(&self, host: impl Into<String>, port: u16) -> NodeAddr {
        NodeAddr {
            host: host.into(),
            port,
            tls: self.tls,
            username: self.username.clone(),
            password: self.password.clone(),
            db: self.db,
        }
    }
}

impl fmt::Debug for MasterAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterAuth")
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("tls", &self.tls)
            .finish()
    }
}

impl StoreUrl {
    /// Parses `s`, taking missing passwords from `env` (called with
    /// [`PASSWORD_ENV`] or [`SENTINEL_PASSWORD_ENV`]) instead of the process
    /// environment. [`FromStr`](std::str::FromStr) uses the real environment.
    pub fn parse_with_env(s: &str, env: impl Fn(&str) -> Option<String>) -> Result<Self, BadUrl> {
        parse(s, &env).map_err(|reason| BadUrl {
            url: redact(s),
            reason,
        })
    }

    /// The nodes this URL names (Sentinels for a Sentinel URL).
    pub fn nodes(&self) -> &[NodeAddr] {
        match self {
            Self::Single(n) => std::slice::from_ref(n),
            Self::Cluster(n) | Self::Shards(n) => n,
            Self::Sentinel { sentinels, .. } => sentinels,
        }
    }

    fn scheme(&self) -> &'static str {
        let tls = self.nodes().first().is_some_and(|n| n.tls);
        match (self, tls) {
            (Self::Single(_), false) => "redis",
            (Self::Single(_), true) => "rediss",
            (Self::Cluster(_), false) => "redis+cluster",
            (Self::Cluster(_), true) => "rediss+cluster",
            (Self::Shards(_), false) => "redis+shards",
            (Self::Shards(_), true) => "rediss+shards",
            (Self::Sentinel { .. }, false) => "redis+sentinel",
            (Self::Sentinel { .. }, true) => "rediss+sentinel",
        }
    }
}

/// The canonical URL with the password as `***`. A password that came from
/// the environment is shown as `***` too. A Sentinel URL's Sentinels are
/// written without their own credentials.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme())?;
        let (user, pass) = match self {
            Self::Sentinel { master_auth, .. } => (&master_auth.username, &master_auth.password),
            _ => match self.nodes().first() {
                Some(n) => (&n.username, &n.password),
                None => (&None, &None),
            },
        };
        match (user, pass) {
            (Some(u), Some(_)) => write!(f, "{u}:***@")?,
            (Some(u), None) => write!(f, "{u}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        for (i, node) in self.nodes().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            node.write_host_port(f)?;
        }
        match self {
            Self::Single(n) if n.db != 0 => write!(f, "/{}", n.db),
            Self::Shards(n) => match n.first() {
                Some(first) if first.db != 0 => write!(f, "/{}", first.db),
                _ => Ok(()),
            },
            Self::Sentinel {
                master,
                master_auth,
                ..
            } => {
                write!(f, "/{master}")?;
                if master_auth.db != 0 {
                    write!(f, "/{}", master_auth.db)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

impl std::str::FromStr for StoreUrl {
    type Err = BadUrl;

    /// Parses a store URL; a missing password comes from
    /// `SLUICE_REDIS_PASSWORD` (and `SLUICE_REDIS_SENTINEL_PASSWORD`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_with_env(s, |name| std::env::var(name).ok())
    }
}

/// `s` with anything that could be a password replaced by `***`: the text
/// between the first `:` of the user-info and its last `@`. Without a
/// scheme, everything before the last `@` is hidden.
pub fn redact(s: &str) -> String {
    let (scheme, rest) = match s.find("://") {
        Some(i) => (&s[..i + 3], &s[i + 3..]),
        None => ("", s),
    };
    let Some(at) = rest.rfind('@') else {
        return s.to_owned();
    };
    let (userinfo, hosts) = (&rest[..at], &rest[at..]);
    if scheme.is_empty() {
        return format!("***{hosts}");
    }
    match userinfo.find(':') {
        Some(colon) => format!("{scheme}{}:***{hosts}", &userinfo[..colon]),
        None => s.to_owned(),
    }
}

/// Which deployment a scheme names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Single,
    Cluster,
    Shards,
    Sentinel,
}

/// The parser proper; the error is a reason that never contains a password.
fn parse(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<StoreUrl, String> {
    let s = s.trim();
    let Some((scheme, rest)) = s.split_once("://") else {
        return Err(
            "missing scheme: expected redis://, rediss://, redis+cluster://, \
                    redis+shards:// or redis+sentinel://"
                .into(),
        );
    };
    let (kind, tls) = match scheme.to_ascii_lowercase().as_str() {
        "redis" => (Kind::Single, false),
        "rediss" => (Kind::Single, true),
        "redis+cluster" => (Kind::Cluster, false),
        "rediss+cluster" => (Kind::Cluster, true),
        "redis+shards" => (Kind::Shards, false),
        "rediss+shards" => (Kind::Shards, true),
        "redis+sentinel" => (Kind::Sentinel, false),
        "rediss+sentinel" => (Kind::Sentinel, true),
        other => {
            return Err(format!(
                "unknown scheme `{other}`: expected redis, rediss, redis+cluster, \
                 redis+shards or redis+sentinel (or their rediss+ forms)"
            ));
        }
    };

    // The user-info ends at the last `@`, so that an unencoded `@` or `/`
    // in a password still parses (and is still redacted).
    let (userinfo, rest) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let (username, password) = match userinfo {
        None => (None, None),
        Some(info) => {
            let (user, pass) = match info.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (info, None),
            };
            let user = percent_decode(user).map_err(|e| format!("user name: {e}"))?;
            let pass = match pass {
                Some(p) => Some(percent_decode(p).map_err(|_| {
                    "the password is not validly percent-encoded (write `%40` for `@`, \
                     `%25` for `%`)"
                        .to_owned()
                })?),
                None => None,
            };
            (
                Some(user).filter(|u| !u.is_empty()),
                pass.filter(|p| !p.is_empty()),
            )
        }
    };
    let password = password.or_else(|| env(PASSWORD_ENV).filter(|p| !p.is_empty()));

    if rest.contains('?') {
        return Err("query parameters are not supported".into());
    }
    if rest.contains('#') {
        return Err("fragments (`#…`) are not supported".into());
    }
    let (hostlist, path) = match rest.split_once('/') {
        Some((h, p)) => (h, p),
        None => (rest, ""),
    };
    let default_port = if kind == Kind::Sentinel {
        SENTINEL_PORT
    } else {
        REDIS_PORT
    };
    let mut hosts = Vec::new();
    for item in hostlist.split(',') {
        let (host, port) = parse_host_port(item, default_port)?;
        if hosts.iter().any(|(h, p)| *h == host && *p == port) {
            return Err(format!("node `{item}` is listed twice"));
        }
        hosts.push((host, port));
    }
    let segments: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();

    let node = |(host, port): (String, u16), db: i64| NodeAddr {
        host,
        port,
        tls,
        username: username.clone(),
        password: password.clone(),
        db,
    };
    match kind {
        Kind::Single => {
            if hosts.len() != 1 {
                return Err(format!(
                    "{scheme}:// names one node, this URL names {}: use redis+cluster://, \
                     redis+shards:// or redis+sentinel:// for several",
                    hosts.len()
                ));
            }
            let db = parse_db_path(&segments)?;
            let host = hosts.remove(0);
            Ok(StoreUrl::Single(node(host, db)))
        }
        Kind::Cluster => {
            if !segments.is_empty() {
                return Err(
                    "Redis Cluster has only database 0: remove the path after the hosts".into(),
                );
            }
            Ok(StoreUrl::Cluster(
                hosts.into_iter().map(|h| node(h, 0)).collect(),
            ))
        }
        Kind::Shards => {
            let db = parse_db_path(&segments)?;
            Ok(StoreUrl::Shards(
                hosts.into_iter().map(|h| node(h, db)).collect(),
            ))
        }
        Kind::Sentinel => {
            let (master, db) = match segments.as_slice() {
                [] => {
                    return Err(
                        "missing master name: write redis+sentinel://s1:26379,s2:26379/\
                                <master-name>"
                            .into(),
                    );
                }
                [master] => (*master, 0),
                [master, db] => (*master, parse_db(db)?),
                _ => {
                    return Err("too many path segments: expected /<master-name>[/<db>]".into());
                }
            };
            let master = percent_decode(master).map_err(|e| format!("master name: {e}"))?;
            let sentinel_password = env(SENTINEL_PASSWORD_ENV).filter(|p| !p.is_empty());
            let sentinels = hosts
                .into_iter()
                .map(|(host, port)| NodeAddr {
                    host,
                    port,
                    tls,
                    username: None,
                    password: sentinel_password.clone(),
                    db: 0,
                })
                .collect();
            Ok(StoreUrl::Sentinel {
                sentinels,
                master,
                master_auth: MasterAuth {
                    username,
                    password,
                    db,
                    tls,
                },
            })
        }
    }
}

/// `host[:port]` or `[v6]:port`.
fn parse_host_port(item: &str, default_port: u16) -> Result<(String, u16), String> {
    if item.is_empty() {
        return Err("empty host (check for a stray `,` or a missing host)".into());
    }
    let (host, port) = if let Some(v6) = item.strip_prefix('[') {
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
        (host, port)
    } else {
        match item.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (item, None),
        }
    };
    if host.is_empty() {
        return Err(format!("`{item}`: missing host"));
    }
    if !item.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(format!(
            "host `{host}` contains characters a host name cannot have"
        ));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => {
                return Err(format!(
                    "port `{p}` of `{item}` is not a number in 1..=65535"
                ));
            }
        },
    };
    Ok((host.to_owned(), port))
}

/// An optional `/<db>` path.
fn parse_db_path(segments: &[&str]) -> Result<i64, String> {
    match segments {
        [] => Ok(0),
        [db] => parse_db(db),
        _ => Err("too many path segments: expected at most /<db>".into()),
    }
}

/// A database number.
fn parse_db(db: &str) -> Result<i64, String> {
    match db.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(format!("database `{db}` is not a non-negative number")),
    }
}

/// Decodes `%XX` escapes; the result must be UTF-8. The error never
/// contains the input.
fn percent_decode(s: &str) -> Result<String, &'static str> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or("truncated `%` escape")?;
            let hi = hex_value(hex[0]).ok_or("bad `%` escape")?;
            let lo = hex_value(hex[1]).ok_or("bad `%` escape")?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "not UTF-8 after percent-decoding")
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn percent_decoding() {
        assert_eq!(percent_decode("a%40b%3Ac%2f").unwrap(), "a@b:c/");
        assert!(percent_decode("%4").is_err());
        assert!(percent_decode("%zz").is_err());
        assert!(percent_decode("%ff").is_err());
    }

    #[test]
    fn redaction_of_raw_strings() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:s@cr@t@h:1"), "redis://:***@h:1");
        assert_eq!(redact("u:secret@h:1"), "***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }

    #[test]
    fn display_round_trips() {
        for url in [
            "redis://h:6379",
            "rediss://u:***@h:6380/2",
            "redis+cluster://a:1,b:2",
            "redis+shards://:***@a:1,[::1]:2/3",
            "rediss+sentinel://s1:26379,s2:26380/mymaster/1",
        ] {
            let parsed = StoreUrl::parse_with_env(url, no_env).unwrap();
            assert_eq!(parsed.to_string(), url);
        }
    }
}
