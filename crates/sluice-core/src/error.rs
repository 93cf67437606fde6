//! Typed errors of the algorithms.

use thiserror::Error;

/// A limit's parameters are unusable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LimitError {
    /// The burst (capacity) is zero: nothing could ever pass.
    #[error("burst must be at least 1")]
    ZeroBurst,
    /// The burst times the emission interval does not fit in 64-bit arithmetic.
    #[error(
        "burst {burst} at this rate spans more than 500 years; lower the burst or raise the rate"
    )]
    TooLong {
        /// The offending burst.
        burst: u64,
    },
    /// Window counters are 32-bit.
    #[error("burst {burst} is too large for a window algorithm (at most {max})")]
    BurstTooLarge {
        /// The offending burst.
        burst: u64,
        /// The largest burst the algorithm accepts.
        max: u64,
    },
}

/// A single check cannot be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum CheckError {
    /// The request costs more than the limit can ever admit. It would never
    /// pass, however long the client waited, so it is refused outright and no
    /// state changes.
    #[error("cost {cost} exceeds the limit's capacity of {capacity}: this request can never pass")]
    CostExceedsCapacity {
        /// The request's cost.
        cost: u64,
        /// The limit's capacity (its burst).
        capacity: u64,
    },
}
