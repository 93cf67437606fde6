//! One Redis node: its address and credentials, printed without the
//! password.

use std::fmt;

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
    /// With TLS, a PEM file of the certificate authorities the node is
    /// checked against (from [`CA_FILE_ENV`](crate::CA_FILE_ENV)); none:
    /// the public web roots.
    pub ca_file: Option<std::path::PathBuf>,
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
            ca_file: None,
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
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

/// `host:port`, never the credentials.
impl fmt::Display for NodeAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_host_port(f)
    }
}
