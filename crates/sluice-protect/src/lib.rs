//! # sluice-protect
//!
//! A store over the network can be slow, fail, or be gone for a while; a
//! rate limiter in front of a paid API must still answer every request, at
//! once. [`Protected`] wraps any [`Remote`] store (Redis, in
//! `sluice-redis`) and turns it into a [`Store`](sluice_store::seam::Store)
//! that always decides within its timeout:
//!
//! - [`breaker`]: a circuit breaker, so a dead store costs one failed call
//!   per interval, not one per request;
//! - [`over_limit`]: a cache of recent refusals, so one abusive key does not
//!   reach the store;
//! - [`local`]: the local fallback, this instance's share of every limit in
//!   memory while the store cannot decide (or `allow`, or `deny`);
//! - [`ledger`]: what the fallback admitted, charged to the store when it
//!   is back ([`recovery`]);
//! - refunds (`Store::refund`) forgive what the ledger owes first (also
//!   while it is being charged: the charge then gives the store back what
//!   it took beyond what is still owed), then go to the store, or to the
//!   local share while the store cannot take them;
//! - debits (`Store::debit`) go to the store while it takes them, else to
//!   the local share (which then refuses the key while in debt), and are
//!   owed to the store in the ledger, charged as debits when it is back.
//!
//! None of it knows a network client: the remote store's own crate
//! implements [`Remote`].

pub mod breaker;
pub mod flaps;
pub mod ledger;
pub mod local;
pub mod over_limit;
pub mod recovery;

mod debit;
mod protected;
mod refund;
mod remote;

pub use protected::Protected;
pub use remote::{Remote, RemoteError};
pub use sluice_store::seam::ProtectOptions;
