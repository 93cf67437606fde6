//! The labels of the metrics recorded as requests are decided: the outcome
//! values (public, for readers such as the status page) and the label sets
//! the families are keyed by.

use std::sync::Arc;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use sluice_policy::Outcome;

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum RequestOutcome {
    /// Admitted.
    allowed,
    /// Refused by a limit (429).
    limited,
    /// On the deny list (403).
    denied,
    /// Lacked the key a limit counts by (401).
    missing_key,
    /// Cost no limit could ever admit (400).
    invalid,
    /// Refused by the `deny` fallback while Redis was down (503).
    store_unavailable,
    /// Not decided, by Sluice's own fault (500).
    internal,
}

impl From<Outcome> for RequestOutcome {
    fn from(o: Outcome) -> Self {
        match o {
            Outcome::Allowed | Outcome::Delayed => Self::allowed,
            Outcome::Limited => Self::limited,
            Outcome::StoreUnavailable => Self::store_unavailable,
            Outcome::MissingKey => Self::missing_key,
            Outcome::Denied => Self::denied,
            Outcome::Invalid => Self::invalid,
            Outcome::Internal => Self::internal,
        }
    }
}

/// One limit's outcome for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum LimitOutcome {
    /// The limit admitted it.
    allowed,
    /// The limit refused it.
    limited,
    /// The limit admitted it after a wait.
    delayed,
    /// A shadow limit that would have admitted it.
    shadow_allowed,
    /// A shadow limit that would have refused it.
    shadow_limited,
}

/// `sluice_requests_total`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RequestLabels {
    pub(super) outcome: RequestOutcome,
}

/// `sluice_decisions_total`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct DecisionLabels {
    pub(super) limit: Arc<str>,
    pub(super) plan: Arc<str>,
    pub(super) endpoint: Arc<str>,
    pub(super) outcome: LimitOutcome,
}

/// `sluice_limited_retry_after_seconds`'s labels.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct LimitNameLabels {
    pub(super) limit: Arc<str>,
}
