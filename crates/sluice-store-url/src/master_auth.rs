//! How to log in to the master that Sentinels name.

use std::fmt;

use crate::NodeAddr;

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
    /// With TLS, the CA file the master is checked against (see
    /// [`NodeAddr::ca_file`]).
    pub ca_file: Option<std::path::PathBuf>,
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
            ca_file: self.ca_file.clone(),
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
            .field("ca_file", &self.ca_file)
            .finish()
    }
}
