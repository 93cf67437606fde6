//! What every node of one URL shares: TLS and the credentials.

use super::userinfo::Credentials;
use crate::{MasterAuth, NodeAddr};

/// TLS (from the scheme) and the credentials (from the user-info or the
/// environment) of one URL's nodes.
pub(super) struct Login {
    /// Whether to use TLS (a `rediss` scheme).
    pub(super) tls: bool,
    /// The user name and password.
    pub(super) credentials: Credentials,
    /// With TLS, the CA file from the environment.
    pub(super) ca_file: Option<std::path::PathBuf>,
}

impl Login {
    /// The node at `host:port`, with this login and database `db`.
    pub(super) fn node(&self, (host, port): (String, u16), db: i64) -> NodeAddr {
        NodeAddr {
            host,
            port,
            tls: self.tls,
            username: self.credentials.username.clone(),
            password: self.credentials.password.clone(),
            db,
            ca_file: self.ca_file.clone(),
        }
    }

    /// How to log in to a Sentinel-named master: this login, database `db`.
    pub(super) fn master_auth(self, db: i64) -> MasterAuth {
        MasterAuth {
            username: self.credentials.username,
            password: self.credentials.password,
            db,
            tls: self.tls,
            ca_file: self.ca_file,
        }
    }
}
