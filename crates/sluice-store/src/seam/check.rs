//! What a decision asks of a store, and what it answers.

use sluice_core::Decision;
use smallvec::SmallVec;

use super::counter::Counter;
use crate::key::KeyId;

/// One limit to check for one request.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The limit's counter, registered with the store that decides.
    pub counter: &'a Counter,
    /// The client key's keyed hash.
    pub key: KeyId,
    /// The request's cost under this limit; 0 peeks (charges nothing).
    pub cost: u64,
    /// The cost that must still be left after the charge (0 for none): a
    /// request is admitted only if `cost + reserve` fits, and its
    /// `remaining` is counted above the reserve. Priority classes keep
    /// their share of a limit with it; a delay limit is decided on its
    /// plain bucket with it.
    pub reserve: u64,
    /// On a concurrency limit, the lease the slots are held under (see
    /// [`LeaseId`](super::LeaseId)): taken, renewed (cost 0) or released (a
    /// refund) as that lease's. `None`: held by this instance, which sees
    /// the request end. Other algorithms ignore it.
    pub lease: Option<super::LeaseId>,
}

/// One decision per check, inline for the usual few.
pub type Decisions = SmallVec<[Decision; 4]>;

/// The answer to a group of checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Whether every check was admitted (and all were charged). When not,
    /// nothing was charged anywhere.
    pub allowed: bool,
    /// One decision per check, in order. When the request is refused, the
    /// limits that would have admitted it report their state unchanged.
    pub decisions: Decisions,
    /// Who decided.
    pub by: DecidedBy,
    /// The decisions are on `1/share` of each limit: 1, but for a local
    /// fallback deciding this instance's share while a shared store
    /// cannot.
    pub share: u32,
}

impl Checked {
    /// The store's own answer.
    pub fn by_store(allowed: bool, decisions: Decisions) -> Self {
        Self {
            allowed,
            decisions,
            by: DecidedBy::Store,
            share: 1,
        }
    }

    /// The decision of a group of one check. A store answers one decision
    /// per check; were there none, a refusal.
    pub fn single(&self) -> Decision {
        self.decisions.first().copied().unwrap_or(Decision {
            allowed: false,
            ..Decision::full(0)
        })
    }

    /// The fallback that decided, if one did.
    pub fn fallback(&self) -> Option<Fallback> {
        match self.by {
            DecidedBy::Fallback(f) => Some(f),
            DecidedBy::Store | DecidedBy::Cache => None,
        }
    }
}

/// Who made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// The store.
    Store,
    /// A cache repeating a recent refusal from the store.
    Cache,
    /// A fallback, because the store could not.
    Fallback(Fallback),
}

/// Who decides while a shared store cannot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Fallback {
    /// A local in-memory limit at `1/expected_instances` of each limit.
    #[default]
    Local,
    /// Admit everything.
    Allow,
    /// Refuse everything (an HTTP server answers 503).
    Deny,
}

impl Fallback {
    /// `local`, `allow` or `deny`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// Why a store could not decide a group of checks. A store that can fail
/// (Redis) answers through a fallback instead; what is left is what no
/// store can decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// A check's cost (with its reserve) exceeds its limit's capacity: it
    /// can never pass. Nothing was charged.
    #[error("cost {cost} exceeds the limit's capacity of {capacity}; it can never pass")]
    Impossible {
        /// The cost asked (with the reserve).
        cost: u64,
        /// The limit's burst.
        capacity: u64,
    },
    /// A check's counter was registered with another store.
    #[error("limit `{0}` was registered with another store")]
    ForeignCounter(String),
    /// The store does not support this operation (yet): nothing was
    /// changed. A debit ([`Store::debit`](crate::seam::Store::debit)) on a
    /// store over the network answers this until that store implements it.
    #[error("the {store} store does not support {operation} yet")]
    Unsupported {
        /// The store's [kind](crate::seam::Store::kind).
        store: &'static str,
        /// The operation asked: `debit`.
        operation: &'static str,
    },
}

impl From<sluice_core::CheckError> for StoreError {
    fn from(e: sluice_core::CheckError) -> Self {
        match e {
            sluice_core::CheckError::CostExceedsCapacity { cost, capacity } => {
                Self::Impossible { cost, capacity }
            }
        }
    }
}
