//! The Redis store's errors.

use std::time::Duration;

/// Why the Redis store could not decide.
#[derive(Debug, thiserror::Error)]
pub enum RedisStoreError {
    /// The store URL is malformed. The message never contains a password.
    #[error(transparent)]
    BadUrl(#[from] sluice_store_url::BadUrl),
    /// Redis answered with an error, or the connection failed.
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    /// The store has not connected yet.
    #[error("not connected to redis yet")]
    NotConnected,
    /// Redis did not answer in time.
    #[error("redis did not answer within {0:?}")]
    Timeout(Duration),
    /// A check can never pass (its cost exceeds the limit's capacity); no
    /// state was read or changed.
    #[error(transparent)]
    Check(#[from] sluice_core::CheckError),
    /// A debit of a limit the script cannot hold debt for: a sliding log
    /// whose window is not a whole number of microseconds (see
    /// [`RedisStore::debit`](crate::RedisStore::debit)). Nothing changed.
    #[error(
        "limit `{0}`: a sliding log whose window is not a whole number of microseconds cannot be debited on redis"
    )]
    DebitUnsupported(String),
    /// The script answered something this version does not understand.
    #[error("unexpected reply from the decision script: {0}")]
    BadReply(String),
}
