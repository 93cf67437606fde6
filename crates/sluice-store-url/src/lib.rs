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

mod bad_url;
mod env_vars;
mod master_auth;
mod node_addr;
mod parse;
mod percent;
mod redact;
mod store_url;

pub use bad_url::BadUrl;
pub use env_vars::{CA_FILE_ENV, PASSWORD_ENV, SENTINEL_PASSWORD_ENV};
pub use master_auth::MasterAuth;
pub use node_addr::NodeAddr;
pub use redact::redact;
pub use store_url::StoreUrl;
