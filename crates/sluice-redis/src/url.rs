//! Store URLs ([`sluice_store_url`]) and what the Redis client needs of
//! them: connection parameters, TLS, socket options.

pub use sluice_store_url::{
    BadUrl, CA_FILE_ENV, MasterAuth, NodeAddr, PASSWORD_ENV, SENTINEL_PASSWORD_ENV, StoreUrl,
    redact,
};

/// The socket options of every connection to Redis: `TCP_NODELAY`, as
/// Redis itself sets on its side. A connection carries many small commands
/// pipelined; with Nagle's algorithm, a command written while an earlier
/// one is unacknowledged waits for that acknowledgement, so under network
/// latency a decision could take two round trips instead of one.
pub(crate) fn tcp_settings() -> redis::io::tcp::TcpSettings {
    redis::io::tcp::TcpSettings::default().set_nodelay(true)
}

/// What redis-rs needs to connect to a node.
pub(crate) trait Connect {
    /// The connection parameters redis-rs needs for this node.
    fn connection_info(&self) -> redis::RedisResult<redis::ConnectionInfo>;

    /// A redis-rs client for this node. A TLS node is checked against the
    /// CAs in its [`ca_file`](NodeAddr::ca_file) (from [`CA_FILE_ENV`]
    /// when its URL was parsed) when it has one, else
    /// against the public web roots.
    fn client(&self) -> redis::RedisResult<redis::Client>;
}

impl Connect for NodeAddr {
    fn connection_info(&self) -> redis::RedisResult<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo as _;
        if self.tls {
            // redis-rs leaves the process's TLS crypto provider to the
            // application. Idempotent: an error means one is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let addr = if self.tls {
            redis::ConnectionAddr::TcpTls {
                host: self.host.clone(),
                port: self.port,
                insecure: false,
                tls_params: None,
            }
        } else {
            redis::ConnectionAddr::Tcp(self.host.clone(), self.port)
        };
        let mut settings = redis::RedisConnectionInfo::default().set_db(self.db);
        if let Some(user) = &self.username {
            settings = settings.set_username(user);
        }
        if let Some(pass) = &self.password {
            settings = settings.set_password(pass);
        }
        Ok(addr
            .into_connection_info()?
            .set_redis_settings(settings)
            .set_tcp_settings(tcp_settings()))
    }

    fn client(&self) -> redis::RedisResult<redis::Client> {
        let info = self.connection_info()?;
        match &self.ca_file {
            Some(path) if self.tls => {
                let pem = std::fs::read(path).map_err(|e| {
                    redis::RedisError::from((
                        redis::ErrorKind::Io,
                        "cannot read SLUICE_REDIS_CA_FILE",
                        format!("{}: {e}", path.display()),
                    ))
                })?;
                redis::Client::build_with_tls(
                    info,
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
            }
            _ => redis::Client::open(info),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_connection_sets_tcp_nodelay() {
        assert!(tcp_settings().nodelay());
        for node in [
            NodeAddr::new("h", 1),
            NodeAddr {
                tls: true,
                ..NodeAddr::new("h", 2)
            },
        ] {
            let info = node.connection_info().unwrap();
            assert!(info.tcp_settings().nodelay(), "{node}");
        }
    }
}
