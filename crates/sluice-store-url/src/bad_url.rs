//! The error of a store URL that does not parse.

/// A store URL that does not parse. The message never contains a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid store URL `{url}`: {reason}")]
pub struct BadUrl {
    /// The URL with any password replaced by `***`.
    pub url: String,
    /// What is wrong with it.
    pub reason: String,
}
