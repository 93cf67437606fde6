//! How a decided request ends: one map from a decision to an outcome, for
//! every adapter, the metrics and the simulator.

use super::verdict::{DecideError, Verdict};

/// How a request ends. Each adapter answers it its own way; for HTTP,
/// [`http_status`](Self::http_status).
///
/// ```
/// use sluice_policy::{DecideError, Outcome};
/// let denied: Result<sluice_policy::Verdict, DecideError> = Err(DecideError::Denied);
/// assert_eq!(Outcome::of(&denied), Outcome::Denied);
/// assert_eq!(Outcome::Denied.http_status(), 403);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Admitted at once.
    Allowed,
    /// Admitted, to be held first (leaky bucket queueing, a delay limit).
    Delayed,
    /// Refused by a limit.
    Limited,
    /// Refused because the store could not decide and its fallback refuses
    /// everything (`fallback = "deny"`).
    StoreUnavailable,
    /// A key a limit counts by is missing.
    MissingKey,
    /// The client is on the deny list.
    Denied,
    /// A bad request: it costs more than a limit can ever admit, its path
    /// has no canonical form, or its key is ambiguous.
    Invalid,
    /// Sluice's own fault ([`DecideError::Internal`]).
    Internal,
}

impl Outcome {
    /// The outcome of a decision.
    pub fn of(decided: &Result<Verdict, DecideError>) -> Self {
        match decided {
            Ok(v) => Self::of_verdict(v),
            Err(e) => Self::of_error(e),
        }
    }

    /// The outcome of a request that was decided.
    pub fn of_verdict(v: &Verdict) -> Self {
        if v.allowed && v.delay() > 0 {
            Self::Delayed
        } else if v.allowed {
            Self::Allowed
        } else if v.store_unavailable() {
            Self::StoreUnavailable
        } else {
            Self::Limited
        }
    }

    /// The outcome of a request that could not be decided.
    pub fn of_error(e: &DecideError) -> Self {
        match e {
            DecideError::MissingKey(_) => Self::MissingKey,
            DecideError::Denied => Self::Denied,
            DecideError::Impossible { .. }
            | DecideError::Path(_)
            | DecideError::Host(_)
            | DecideError::AmbiguousKey(_) => Self::Invalid,
            DecideError::Internal(_) => Self::Internal,
        }
    }

    /// The HTTP status a server answers with.
    pub fn http_status(self) -> u16 {
        match self {
            Self::Allowed | Self::Delayed => 200,
            Self::Limited => 429,
            Self::StoreUnavailable => 503,
            Self::MissingKey => 401,
            Self::Denied => 403,
            Self::Invalid => 400,
            Self::Internal => 500,
        }
    }

    /// [`http_status`](Self::http_status) as a status code.
    pub fn status_code(self) -> http::StatusCode {
        http::StatusCode::from_u16(self.http_status())
            .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR)
    }

    /// Whether the request was admitted.
    pub fn admitted(self) -> bool {
        matches!(self, Self::Allowed | Self::Delayed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_of_another_store_is_an_internal_error_not_an_impossible_cost() {
        // It was reported as a cost of 0 that could never pass: a 400 that
        // blamed the client for Sluice's own fault.
        let e = DecideError::from(sluice_store::seam::StoreError::ForeignCounter("api".into()));
        assert!(
            matches!(&e, DecideError::Internal(m) if m.contains("`api`")),
            "{e}"
        );
        let outcome = Outcome::of(&Err(e));
        assert_eq!((outcome, outcome.http_status()), (Outcome::Internal, 500));
    }
}
