//! The six rate algorithms, one per file, and the concurrency limit
//! ([`concurrency`]), which has no rate of its own.
//!
//! Every algorithm is parameterised by a [`Rate`](crate::Rate) (the long-run
//! average) and a `burst` (the most cost admitted at once from an idle key).
//! The window algorithms use windows of `burst / rate`, so that `burst` means
//! the same thing everywhere; see `docs/algorithms.md`.

pub mod bucket;
pub mod concurrency;
pub mod fixed_window;
pub mod gcra;
pub mod leaky_bucket;
mod log_debt;
pub mod sliding_log;
pub mod sliding_window;
pub mod token_bucket;
pub(crate) mod window;
