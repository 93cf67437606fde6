//! # sluice-core
//!
//! The rate-limiting algorithms of Sluice, as plain, synchronous, I/O-free code.
//!
//! Every algorithm is a small value holding its parameters (see [`Algorithm`]).
//! It never owns per-key state and never reads a clock: the caller passes the
//! state and the current time in, and gets a [`Decision`] plus an optional state
//! update back. That split lets a store decide several limits together and
//! commit all of them or none (all-or-nothing), and lets tests drive the
//! algorithms with a simulated clock.
//!
//! ```
//! use sluice_core::{Algorithm, Gcra, Rate};
//!
//! // 10 requests per second with a burst of 20.
//! let gcra = Gcra::new(Rate::per_second(10), 20).unwrap();
//! let mut state = Default::default();
//! let now = 1_000_000_000; // nanoseconds on any clock
//! let mut admitted = 0;
//! for _ in 0..30 {
//!     if gcra.check_and_apply(&mut state, now, 1).unwrap().allowed {
//!         admitted += 1;
//!     }
//! }
//! assert_eq!(admitted, 20);
//! ```

pub mod adaptive;
pub mod algorithm;
pub mod algorithms;
pub mod clock;
pub mod decision;
pub mod error;
pub mod limiter;
mod math;
pub mod rate;
mod stack_text;

pub use algorithm::{Algorithm, Debited, Outcome};
pub use algorithms::{
    concurrency::Concurrency, fixed_window::FixedWindow, gcra::Gcra, leaky_bucket::LeakyBucket,
    sliding_log::SlidingLog, sliding_window::SlidingWindow, token_bucket::TokenBucket,
};
pub use clock::{Clock, ManualClock, Nanos, SystemClock};
pub use decision::Decision;
pub use error::{CheckError, LimitError};
pub use limiter::{AlgorithmKind, LimitSpec, Limiter, State, Update};
pub use rate::{Rate, RateParseError, parse_duration};
pub use stack_text::StackText;
