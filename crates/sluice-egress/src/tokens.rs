//! Token quotas on outbound calls: an organisation's own tokens per
//! minute (or per day) at a partner that bills by tokens, such as an LLM
//! provider.
//!
//! A call reserves an estimate of its tokens when it is let go (with its
//! call quota, all or nothing), and is settled against what the partner's
//! answer reports (the `usage` of an OpenAI-style JSON body or event
//! stream, read as the body streams past): the difference is charged, into
//! debt if need be, or given back. While a target is in debt its calls
//! wait, as they wait for any quota, until the rate has paid the debt off;
//! the debt is bounded by [`TokenQuota::max_debt`], and what would pass it
//! is counted in [`EgressLimiter::excess_tokens`](crate::EgressLimiter::excess_tokens)
//! and logged, never dropped in silence. A call whose answer reports no
//! usage (an error page, a stream cut short) keeps its estimate.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_core::LimitSpec;
use sluice_store::KeyId;
use sluice_store::seam::{Check, Counter, Store};

/// A quota of tokens for calls to a target, settled from the usage the
/// target reports.
///
/// ```
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_egress::TokenQuota;
///
/// // 40,000 tokens a minute, a whole minute's worth at once; a call that
/// // names no max_tokens reserves 1,000 of them.
/// let quota = TokenQuota::new(LimitSpec {
///     algorithm: AlgorithmKind::Gcra,
///     rate: Rate::per_minute(40_000),
///     burst: 40_000,
///     nodelay: true,
/// })
/// .estimate(1_000);
/// assert_eq!(quota.max_debt, 40_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenQuota {
    /// The tokens allowed: their rate and burst.
    pub spec: LimitSpec,
    /// The tokens a call reserves when it names no estimate of its own
    /// (see [`RateLimitedClient`](crate::RateLimitedClient) and
    /// [`TokenEstimate`]). Default 1.
    pub estimate: u64,
    /// The most tokens a target may owe beyond its quota. Default: one
    /// burst.
    pub max_debt: u64,
}

impl TokenQuota {
    /// A quota of `spec`, with an estimate of 1 token a call and a debt of
    /// at most one burst.
    pub fn new(spec: LimitSpec) -> Self {
        Self {
            spec,
            estimate: 1,
            max_debt: spec.burst,
        }
    }

    /// Reserves `tokens` for a call that names no estimate.
    pub fn estimate(self, tokens: u64) -> Self {
        Self {
            estimate: tokens,
            ..self
        }
    }

    /// Lets a target owe at most `tokens` beyond its quota.
    pub fn max_debt(self, tokens: u64) -> Self {
        Self {
            max_debt: tokens,
            ..self
        }
    }
}

/// The tokens one call estimates it will use, given to an
/// [`EgressService`](crate::EgressService) as a request extension (for
/// example the call's `max_tokens`). Without it, the call reserves its
/// quota's [`TokenQuota::estimate`].
///
/// ```
/// let mut request = http::Request::new(());
/// request.extensions_mut().insert(sluice_egress::TokenEstimate(512));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenEstimate(pub u64);

/// A token quota's counter in the limiter's store.
#[derive(Debug, Clone)]
pub(crate) struct TokenCounter {
    pub(crate) counter: Counter,
    pub(crate) quota: TokenQuota,
}

/// The tokens a call reserved, to be settled when its answer is known.
/// Dropped unsettled, the estimate stands.
#[derive(Debug)]
pub(crate) struct Reserved {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) counter: Counter,
    pub(crate) key: KeyId,
    pub(crate) tokens: u64,
    pub(crate) max_debt: u64,
    pub(crate) excess: Arc<AtomicU64>,
}

/// What settling a call's tokens did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Settled {
    /// Tokens the call reserved.
    pub reserved: u64,
    /// Tokens its answer reported.
    pub used: u64,
    /// Tokens not charged, because the target's debt would have passed
    /// [`TokenQuota::max_debt`] (also added to
    /// [`EgressLimiter::excess_tokens`](crate::EgressLimiter::excess_tokens)).
    pub excess: u64,
}

impl Reserved {
    /// Settles the reservation at `used` tokens: the tokens beyond the
    /// reservation are charged whatever is left (into debt up to
    /// `max_debt`), those below it given back. A store that cannot settle
    /// (it is unreachable and nothing decides in its place) leaves the
    /// estimate, and says so in the log.
    pub(crate) async fn settle(self, used: u64) -> Settled {
        let mut settled = Settled {
            reserved: self.tokens,
            used,
            excess: 0,
        };
        if used > self.tokens {
            let more = used - self.tokens;
            match self
                .store
                .debit(&self.counter, self.key, more, self.max_debt)
                .await
            {
                Ok(debited) => settled.excess = debited.excess,
                Err(error) => {
                    tracing::warn!(%error, tokens = more, "egress: tokens used beyond the estimate could not be charged")
                }
            }
        } else if used < self.tokens {
            let back = Check {
                counter: &self.counter,
                key: self.key,
                cost: self.tokens - used,
                reserve: 0,
                lease: None,
            };
            if let Err(error) = self.store.refund(&[back]).await {
                tracing::warn!(%error, tokens = back.cost, "egress: tokens reserved but unused could not be given back");
            }
        }
        if settled.excess > 0 {
            self.excess.fetch_add(settled.excess, Ordering::Relaxed);
            tracing::warn!(
                limit = self.counter.def().id(),
                excess = settled.excess,
                "egress: a call used more tokens than the quota and its debt allow; the excess is not charged"
            );
        }
        settled
    }
}

/// A call's own estimate from its JSON body, if it is one and names its
/// most tokens: `max_completion_tokens`, else `max_tokens` (a top-level
/// non-negative integer). Bodies over 1 MiB are not read.
pub(crate) fn body_estimate(body: &[u8]) -> Option<u64> {
    const MAX_BODY: usize = 1 << 20;
    if body.len() > MAX_BODY {
        return None;
    }
    let (mut completion, mut max) = (None, None);
    let object = sluice_usage::top_level_scalars(body, |name, v| match (name, v) {
        ("max_completion_tokens", sluice_usage::Scalar::Whole(n)) => {
            completion.get_or_insert(n);
        }
        ("max_tokens", sluice_usage::Scalar::Whole(n)) => {
            max.get_or_insert(n);
        }
        _ => {}
    });
    completion
        .or(max)
        .filter(|&n| object && n <= sluice_usage::MAX_TOKENS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_names_its_estimate_by_max_completion_tokens_then_max_tokens() {
        assert_eq!(body_estimate(br#"{"max_tokens": 300}"#), Some(300));
        assert_eq!(
            body_estimate(br#"{"max_tokens": 300, "max_completion_tokens": 200}"#),
            Some(200)
        );
        assert_eq!(body_estimate(br#"{"max_tokens": -1}"#), None);
        assert_eq!(body_estimate(br#"{"max_tokens": 1.5}"#), None);
        assert_eq!(body_estimate(br#"{"max_tokens": 1e300}"#), None);
        assert_eq!(body_estimate(br#"[1, 2]"#), None);
        assert_eq!(body_estimate(b"max_tokens=3"), None);
    }
}
