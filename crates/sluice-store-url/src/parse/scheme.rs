//! The scheme: which deployment a URL names, and whether over TLS.

/// The default Redis port.
const REDIS_PORT: u16 = 6379;

/// The default Sentinel port.
const SENTINEL_PORT: u16 = 26379;

/// Which deployment a scheme names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// One node (`redis://`).
    Single,
    /// Redis Cluster (`redis+cluster://`).
    Cluster,
    /// Independent nodes, keys spread by consistent hashing (`redis+shards://`).
    Shards,
    /// The master that Sentinels name (`redis+sentinel://`).
    Sentinel,
}

impl Kind {
    /// The port of a host written without one: the Sentinel port for
    /// Sentinels, the Redis port otherwise.
    pub(super) fn default_port(self) -> u16 {
        if self == Self::Sentinel {
            SENTINEL_PORT
        } else {
            REDIS_PORT
        }
    }
}

/// Splits `s` into the scheme and what follows its `://`.
pub(super) fn split_scheme(s: &str) -> Result<(&str, &str), String> {
    s.split_once("://").ok_or_else(|| {
        "missing scheme: expected redis://, rediss://, redis+cluster://, \
         redis+shards:// or redis+sentinel://"
            .into()
    })
}

/// The deployment that `scheme` (in any case) names, and whether it is a
/// TLS (`rediss`) form.
pub(super) fn parse_scheme(scheme: &str) -> Result<(Kind, bool), String> {
    match scheme.to_ascii_lowercase().as_str() {
        "redis" => Ok((Kind::Single, false)),
        "rediss" => Ok((Kind::Single, true)),
        "redis+cluster" => Ok((Kind::Cluster, false)),
        "rediss+cluster" => Ok((Kind::Cluster, true)),
        "redis+shards" => Ok((Kind::Shards, false)),
        "rediss+shards" => Ok((Kind::Shards, true)),
        "redis+sentinel" => Ok((Kind::Sentinel, false)),
        "rediss+sentinel" => Ok((Kind::Sentinel, true)),
        other => Err(format!(
            "unknown scheme `{other}`: expected redis, rediss, redis+cluster, \
             redis+shards or redis+sentinel (or their rediss+ forms)"
        )),
    }
}
