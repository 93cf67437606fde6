//! Assembling a Sentinel URL from its parts: the master's name and
//! database from the path, the Sentinels' own password from the
//! environment.

use super::Parts;
use super::path::parse_db;
use crate::percent::percent_decode;
use crate::{NodeAddr, SENTINEL_PASSWORD_ENV, StoreUrl};

/// `redis+sentinel://`: the Sentinels, then `/<master-name>[/<db>]`.
///
/// The URL's credentials are the master's; the Sentinels get the password
/// from [`SENTINEL_PASSWORD_ENV`], if set, and no user name.
pub(super) fn sentinel(
    parts: Parts<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreUrl, String> {
    let Parts {
        login,
        hosts,
        segments,
        ..
    } = parts;
    let (master, db) = master_and_db(&segments)?;
    let master = percent_decode(master).map_err(|e| format!("master name: {e}"))?;
    let sentinel_password = env(SENTINEL_PASSWORD_ENV).filter(|p| !p.is_empty());
    let tls = login.tls;
    let sentinels = hosts
        .into_iter()
        .map(|(host, port)| NodeAddr {
            host,
            port,
            tls,
            username: None,
            password: sentinel_password.clone(),
            db: 0,
            ca_file: login.ca_file.clone(),
        })
        .collect();
    Ok(StoreUrl::Sentinel {
        sentinels,
        master,
        master_auth: login.master_auth(db),
    })
}

/// The (still percent-encoded) master name and the database of the path
/// segments `/<master-name>[/<db>]`.
fn master_and_db<'a>(segments: &[&'a str]) -> Result<(&'a str, i64), String> {
    match segments {
        [] => Err(
            "missing master name: write redis+sentinel://s1:26379,s2:26379/\
             <master-name>"
                .into(),
        ),
        [master] => Ok((*master, 0)),
        [master, db] => Ok((*master, parse_db(db)?)),
        _ => Err("too many path segments: expected /<master-name>[/<db>]".into()),
    }
}
