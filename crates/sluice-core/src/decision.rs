//! The answer every algorithm gives.

use crate::clock::Nanos;

/// The outcome of checking one request against one limit.
///
/// All six algorithms answer with this same shape. Durations are in
/// nanoseconds and are rounded *up*, so that a client which waits the
/// advertised time is admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Decision {
    /// Whether the request may pass.
    pub allowed: bool,
    /// The limit's capacity: the most cost it admits at once (its `burst`).
    pub limit: u64,
    /// Cost that could still be admitted right now, after this request (if it
    /// was allowed) has been counted.
    pub remaining: u64,
    /// Time until the limit is fully replenished (back to `remaining == limit`),
    /// assuming no further requests.
    pub reset_after: Nanos,
    /// For a refused request: the time until a request of the same cost could
    /// pass. `None` when the request was allowed.
    pub retry_after: Option<Nanos>,
    /// For an allowed request: how long it should be held before it is
    /// forwarded. Only the leaky bucket without `nodelay` sets it; it is 0
    /// everywhere else.
    pub delay: Nanos,
}

impl Decision {
    /// The decision for a peek or check that finds the limit idle and full.
    pub fn full(limit: u64) -> Self {
        Self {
            allowed: true,
            limit,
            remaining: limit,
            reset_after: 0,
            retry_after: None,
            delay: 0,
        }
    }
}
