//! A call let go, and the tokens it reserved until its answer settles
//! them.

use crate::tokens::{Reserved, Settled};

/// A call the limiter let go. Where its target has a
/// [`TokenQuota`](crate::TokenQuota), it holds the tokens the call
/// reserved: settle them with the usage the answer reports
/// ([`settle`](Self::settle)), or let a [`MeteredBody`](crate::MeteredBody)
/// read the usage from the answer's body as it streams. Dropped unsettled,
/// the estimate stands.
#[derive(Debug)]
pub struct Permit {
    tokens: Option<Reserved>,
}

impl Permit {
    pub(crate) fn new(tokens: Option<Reserved>) -> Self {
        Self { tokens }
    }

    /// The tokens the call reserved: 0 where its target counts none.
    pub fn reserved_tokens(&self) -> u64 {
        self.tokens.as_ref().map_or(0, |r| r.tokens)
    }

    /// Settles the call at `used` tokens, as its answer reported them: the
    /// tokens beyond the reservation are charged (into debt, up to the
    /// quota's `max_debt`), those below it are given back. Nothing to do
    /// where the target counts no tokens.
    pub async fn settle(self, used: u64) -> Settled {
        match self.tokens {
            Some(reserved) => reserved.settle(used).await,
            None => Settled::default(),
        }
    }

    /// Settles in a task of its own on the current tokio runtime (outside
    /// one, the estimate stands).
    pub(crate) fn settle_later(self, used: u64) {
        if self.tokens.is_none() {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(self.settle(used));
            }
            Err(_) => tracing::warn!(
                used,
                "egress: no tokio runtime to settle a call's tokens in; its estimate stands"
            ),
        }
    }

    /// Whether the call counts tokens (its body is worth metering).
    pub(crate) fn counts_tokens(&self) -> bool {
        self.tokens.is_some()
    }
}
