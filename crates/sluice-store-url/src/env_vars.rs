//! The environment variables that complete a store URL: passwords kept
//! out of configuration files, and a private certificate authority.

/// The environment variable that supplies the password when the URL has none.
pub const PASSWORD_ENV: &str = "SLUICE_REDIS_PASSWORD";

/// The environment variable that supplies the Sentinels' own password.
pub const SENTINEL_PASSWORD_ENV: &str = "SLUICE_REDIS_SENTINEL_PASSWORD";

/// The environment variable naming a PEM file of the certificate
/// authorities that `rediss://` nodes are checked against, instead of the
/// public web roots (for a Redis with a private CA).
pub const CA_FILE_ENV: &str = "SLUICE_REDIS_CA_FILE";
