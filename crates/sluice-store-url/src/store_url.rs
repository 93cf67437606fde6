//! The parsed store URL: which deployment, its nodes, and its canonical
//! (redacted) form.

use std::fmt;

use crate::parse::parse;
use crate::{BadUrl, MasterAuth, NodeAddr, redact};

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

impl StoreUrl {
    /// Parses `s`, taking missing passwords from `env` (called with
    /// [`PASSWORD_ENV`](crate::PASSWORD_ENV) or
    /// [`SENTINEL_PASSWORD_ENV`](crate::SENTINEL_PASSWORD_ENV)) instead of
    /// the process environment. [`FromStr`](std::str::FromStr) uses the real
    /// environment.
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

    /// The canonical scheme of this deployment, in its TLS form when the
    /// (first) node uses TLS.
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
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
