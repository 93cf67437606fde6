//! The store seam: what a decision needs from the state of its limits,
//! whatever holds it.
//!
//! A [`Store`] registers a limit's [counter](CounterDef) once, when a config
//! is compiled, and hands back a [`Counter`]: the definition and the
//! store's own [`Slot`] for it. A decision then asks the store to
//! [check](Store::check) a group of [`Check`]s, one per limit that applies
//! to the request, **all or nothing**: either every check is admitted and
//! charged, or nothing is charged anywhere. A check of cost 0 peeks.
//!
//! The answer is a [`Pending`] future. A store in this process answers
//! [ready](Pending::Ready), so the engine's decision on it runs to the end
//! on its first poll, without allocating and without a runtime
//! ([`now_or_never`]); a store over the network answers later, and is
//! wrapped in a protection that bounds the wait and falls back when it
//! fails ([`DecidedBy`] says who decided).
//!
//! Implementations: the [`MemoryStore`](crate::MemoryStore), and in other
//! crates the Redis store behind its protection. The engine, the HTTP
//! server, the Envoy service and the simulator see only this trait.
//!
//! ```
//! use sluice_core::{AlgorithmKind, LimitSpec, Rate};
//! use sluice_store::seam::{Check, CounterDef, Store, now_or_never};
//! use sluice_store::{KeyHasher, MemoryStore};
//!
//! let store = MemoryStore::new(Default::default());
//! let spec = LimitSpec {
//!     algorithm: AlgorithmKind::TokenBucket,
//!     rate: Rate::per_second(10),
//!     burst: 2,
//!     nodelay: false,
//! };
//! let counter = store.counter(CounterDef::new("per-key", spec).unwrap());
//! let key = KeyHasher::random().key_id("alice");
//! let check = [Check { counter: &counter, key, cost: 1, reserve: 0, lease: None }];
//! let admitted = (0..3)
//!     .filter(|_| now_or_never(Store::check(&store, &check)).unwrap().unwrap().allowed)
//!     .count();
//! assert_eq!(admitted, 2);
//! ```

mod check;
mod counter;
mod health;
mod lease;
mod options;
mod pending;
mod runtime;

pub use check::{Check, Checked, DecidedBy, Decisions, Fallback, StoreError};
pub use counter::{Counter, CounterDef, Slot};
pub use health::{BreakerState, NodeEviction, RemoteHealth};
pub use lease::LeaseId;
pub use options::ProtectOptions;
pub use pending::{Pending, now_or_never};
pub use runtime::{PlansSink, RuntimeStore, RuntimeStoreError};

use crate::key::KeyId;

/// Called after every call to a remote store with its duration and
/// whether it succeeded (for a latency histogram).
pub type CallObserver = Box<dyn Fn(std::time::Duration, bool) + Send + Sync>;

/// Where the state of limits lives. See the module docs.
pub trait Store: Send + Sync + std::fmt::Debug {
    /// What the store is, for metrics and the status page: `memory`, or
    /// the kind of store a protection wraps (`redis`).
    fn kind(&self) -> &'static str;

    /// Registers a counter and returns it with the store's state of it.
    /// The same definition registered again while a counter of it lives
    /// gets the same state (a reload keeps unchanged limits' counts).
    fn counter(&self, def: CounterDef) -> Counter;

    /// Registers a counter whose state is new: never an earlier
    /// registration's, even one still alive. A reload registers so the
    /// limits the policy it replaces did not have (a removed limit may
    /// live on for a while in a copy a thread keeps), and takes the others
    /// from that policy. A store whose state is named by the definition
    /// alone (Redis) gives what [`counter`](Self::counter) gives.
    fn fresh_counter(&self, def: CounterDef) -> Counter {
        self.counter(def)
    }

    /// Decides every check together, all or nothing.
    fn check<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>>;

    /// Decides each check on its own (limits that only record, such as
    /// shadow mode): one answer per check, in order. A remote store sends
    /// them together.
    fn check_each<'a>(
        &'a self,
        checks: &'a [Check<'a>],
    ) -> Pending<'a, Vec<Result<Checked, StoreError>>>;

    /// Gives back each check's `cost` to its counter and key, as charged
    /// earlier: a cost settled after the response, or Envoy's
    /// `is_negative_hits`. Never refused, and never takes a limit past
    /// full (see [`Algorithm::refund`](sluice_core::Algorithm::refund) for
    /// where each algorithm takes it back from); `reserve` is ignored. The
    /// decisions are each limit's state afterwards, as a peek sees it.
    ///
    /// A store that cannot reach its state gives the refund to what decides
    /// in its place (a protected store's local fallback): the answer says
    /// who took it ([`Checked::by`]).
    fn refund<'a>(&'a self, checks: &'a [Check<'a>]) -> Pending<'a, Result<Checked, StoreError>>;

    /// Charges `amount` to `key` of `counter` whatever it has left: a cost
    /// settled after the response, known only once the request was done.
    /// Never refused: what the limit has left is used first, the rest puts
    /// the key into debt, up to `max_debt` units beyond empty; beyond that
    /// it is [`Debited::excess`](sluice_core::Debited::excess), not
    /// charged, for the caller to record and report (see
    /// [`Algorithm::debit`](sluice_core::Algorithm::debit) for each
    /// algorithm's rule). A key in debt is refused until its debt is paid
    /// off, and is not forgotten before.
    ///
    /// A store that does not support it yet answers
    /// [`StoreError::Unsupported`] and changes nothing (the default).
    fn debit<'a>(
        &'a self,
        counter: &'a Counter,
        key: KeyId,
        amount: u64,
        max_debt: u64,
    ) -> Pending<'a, Result<sluice_core::Debited, StoreError>> {
        let _ = (counter, key, amount, max_debt);
        Pending::ready(Err(StoreError::Unsupported {
            store: self.kind(),
            operation: "debit",
        }))
    }

    /// Whether every answer is [ready](Pending::Ready) at once (a store in
    /// this process): a decision on it then completes on its first poll.
    fn answers_at_once(&self) -> bool {
        false
    }

    /// One check, decided now by a store that [answers at
    /// once](Self::answers_at_once): the same as [`check`](Self::check) of
    /// that check alone, answered as its one decision (by the store itself,
    /// on the whole limit), with no group and no future around it. The
    /// usual request meets one limit: this is its path. `None` (and nothing
    /// decided) from a store that does not answer at once.
    fn check_one_now(
        &self,
        _check: &Check<'_>,
    ) -> Option<Result<sluice_core::Decision, StoreError>> {
        None
    }

    /// Forgets every fully replenished key, where the store keeps keys in
    /// this process. Returns how many.
    fn purge_idle(&self) -> usize {
        0
    }

    /// For a store over the network: how it and its protection are doing.
    /// `None` for a store in this process.
    fn remote_health(&self) -> Option<RemoteHealth> {
        None
    }

    /// For a store over the network: `observer` is told of every call
    /// (once; later observers are ignored).
    fn observe_calls(&self, _observer: CallObserver) {}
}
