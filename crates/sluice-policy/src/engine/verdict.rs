//! What the engine answers: a verdict over every limit that applied, and
//! the errors of deciding and of runtime changes.

use std::mem::ManuallyDrop;
use std::path::PathBuf;

use sluice_core::{Decision, LimitSpec, Nanos};
use sluice_store::KeyId;
use sluice_store::seam::{Fallback, RuntimeStoreError};
use smallvec::SmallVec;

use crate::config::HeadersConfig;
use crate::labels::Labels;
use crate::policy::MissingKey;

/// One applied limit's decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitResult {
    /// Its algorithm, rate and burst.
    pub spec: LimitSpec,
    /// The decision under it.
    pub decision: Decision,
    /// How metrics name the limit; its name is [`name`](Self::name).
    pub labels: Labels,
    /// The client key's keyed hash (never the key itself).
    pub key: KeyId,
}

impl LimitResult {
    /// A limit's decision for a key.
    #[inline]
    pub(crate) fn of(limit: &crate::limit::Limit, key: KeyId, decision: Decision) -> Self {
        Self {
            spec: limit.spec,
            decision,
            labels: limit.labels.clone(),
            key,
        }
    }

    /// The limit's name.
    pub fn name(&self) -> &str {
        &self.labels.limit
    }
}

/// One result per enforced limit, inline for up to two: read and filled
/// as the `SmallVec` it holds.
///
/// It is dropped on every decision, and what it holds usually owns nothing
/// (up to two results inline, each naming kept labels: see
/// [`labels`](crate::labels)): that case is one test in line, the rest is
/// dropped out of line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Results(ManuallyDrop<SmallVec<[LimitResult; 2]>>);

impl Results {
    /// No results.
    #[inline]
    pub fn new() -> Self {
        Self::default()
    }
}

impl Drop for Results {
    #[inline]
    fn drop(&mut self) {
        if self.0.spilled() || self.0.iter().any(|r| !r.labels.is_kept()) {
            drop_out_of_line(std::mem::take(&mut *self.0));
        }
        // Else there is nothing to free: the results stay inline and own
        // nothing (a decision, a key id and a reference to kept labels).
    }
}

/// Drops `value` in a call of its own: for drops that the decision path
/// rarely makes, so that their code stays out of it.
#[cold]
#[inline(never)]
pub(super) fn drop_out_of_line<T>(value: T) {
    drop(value);
}

impl std::ops::Deref for Results {
    type Target = SmallVec<[LimitResult; 2]>;

    #[inline]
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Results {
    #[inline]
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<Vec<LimitResult>> for Results {
    fn from(results: Vec<LimitResult>) -> Self {
        Self(ManuallyDrop::new(SmallVec::from_vec(results)))
    }
}

impl<'a> IntoIterator for &'a Results {
    type Item = &'a LimitResult;
    type IntoIter = std::slice::Iter<'a, LimitResult>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

/// A verdict's shadowed results ([`Verdict::shadow`]): a slice, empty on
/// the usual request, where it takes no allocation and dropping it is one
/// test.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shadow(Option<Box<[LimitResult]>>);

impl std::ops::Deref for Shadow {
    type Target = [LimitResult];

    #[inline]
    fn deref(&self) -> &[LimitResult] {
        self.0.as_deref().unwrap_or_default()
    }
}

impl std::ops::DerefMut for Shadow {
    #[inline]
    fn deref_mut(&mut self) -> &mut [LimitResult] {
        self.0.as_deref_mut().unwrap_or_default()
    }
}

/// Dropped on every decision: one test in line, the rest out of line.
impl Drop for Shadow {
    #[inline]
    fn drop(&mut self) {
        if let Some(results) = self.0.take() {
            drop_out_of_line(results);
        }
    }
}

impl From<Vec<LimitResult>> for Shadow {
    fn from(results: Vec<LimitResult>) -> Self {
        Self((!results.is_empty()).then(|| results.into_boxed_slice()))
    }
}

impl<'a> IntoIterator for &'a Shadow {
    type Item = &'a LimitResult;
    type IntoIter = std::slice::Iter<'a, LimitResult>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// The engine's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Whether every applied limit allowed the request.
    pub allowed: bool,
    /// One result per applied, enforced limit, in policy order. Only these
    /// are shown to the client. Inline for up to two (no allocation on
    /// the usual request).
    pub results: Results,
    /// The limits that applied in shadow (shadow mode, or a key outside a
    /// limit's `enforce_percent`): decided and recorded, never refusing, and
    /// never shown to the client; and an adapter's charges decided on their
    /// own ([`Counting`](super::Counting)). Empty when the request was
    /// refused, but for one refused because each of its quota charges was:
    /// those show why (and the others their state after they were given
    /// back).
    pub shadow: Shadow,
    /// The header style of the config that decided it, so that a response
    /// never mixes two configs across a reload.
    pub style: HeadersConfig,
    /// Set when the store could not decide and its fallback did.
    pub fallback: Option<Fallback>,
}

impl Verdict {
    /// The verdict of one enforced limit decided by the store itself.
    #[inline(always)]
    pub(crate) fn one(style: HeadersConfig, result: LimitResult) -> Self {
        let mut verdict = Self {
            allowed: result.decision.allowed,
            fallback: None,
            results: Results::new(),
            shadow: Shadow::default(),
            style,
        };
        verdict.results.push(result);
        verdict
    }

    /// The limits that refused the request.
    pub fn violated(&self) -> impl Iterator<Item = &LimitResult> {
        self.results.iter().filter(|r| !r.decision.allowed)
    }

    /// How long until the request could pass: the longest retry-after of the
    /// violated limits. `None` when allowed.
    pub fn retry_after(&self) -> Option<Nanos> {
        self.violated().filter_map(|r| r.decision.retry_after).max()
    }

    /// How long an admitted request should be held: leaky bucket queueing,
    /// or an `on_limit = "delay"` limit's wait for its reserved slot.
    pub fn delay(&self) -> Nanos {
        self.results
            .iter()
            .map(|r| r.decision.delay)
            .max()
            .unwrap_or(0)
    }

    /// Whether the store could not decide and its fallback refused every
    /// request (`fallback = "deny"`): a server answers 503, not 429.
    pub fn store_unavailable(&self) -> bool {
        !self.allowed && self.fallback == Some(Fallback::Deny)
    }
}

/// Why the runtime assignments could not be saved.
#[derive(Debug, thiserror::Error)]
pub enum SaveError {
    /// The config has no `[client] runtime_keys_file`.
    #[error("the config has no `[client] runtime_keys_file` to save to")]
    NotConfigured,
    /// Writing the file failed.
    #[error("cannot write {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// A plan the policy does not have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no plan named `{0}`")]
pub struct UnknownPlan(pub String);

/// Why a runtime change (a plan assignment, a credit balance) was not made.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The policy has no such plan.
    #[error(transparent)]
    UnknownPlan(#[from] UnknownPlan),
    /// The runtime state store did not take the change; nothing changed.
    #[error(transparent)]
    Store(#[from] RuntimeStoreError),
}

/// Where a key's plan comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanSource {
    /// Assigned at run time.
    Runtime,
    /// Assigned in the config's `[keys]`.
    Config,
    /// The config's `default_plan`.
    Default,
}

/// Why a request could not be decided.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecideError {
    /// A limit needs a key the request lacks.
    #[error(transparent)]
    MissingKey(#[from] MissingKey),
    /// The request names its client ambiguously: a key header with two
    /// values, or forwarding headers that name different clients.
    #[error(transparent)]
    AmbiguousKey(#[from] crate::policy::AmbiguousKey),
    /// The request's `Host` is ambiguous or malformed (see
    /// [`host`](crate::host)).
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
    /// The client is on the deny list.
    #[error("this client is denied")]
    Denied,
    /// The path has no canonical form (see [`path`](crate::path)).
    #[error(transparent)]
    Path(#[from] crate::path::PathError),
    /// Sluice cannot decide because of its own fault, not the request's: a
    /// limit's counter registered with another store, or a caller that
    /// needs an answer at once from a store that cannot give one.
    #[error("internal error: {0}")]
    Internal(String),
    /// The request costs more than a limit can ever admit.
    #[error(
        "limit `{limit}`: cost {cost} exceeds its capacity of {capacity}; this request can never pass"
    )]
    Impossible {
        /// The limit.
        limit: String,
        /// The request's cost.
        cost: u64,
        /// The limit's burst.
        capacity: u64,
    },
}

impl DecideError {
    /// A store's refusal of checks it can never admit, with the limit named
    /// where the store named none: the first of `asked` (each limit, with
    /// the cost asked of it and its reserve) asked for more than its bucket.
    pub(crate) fn from_store<'l>(
        e: sluice_store::seam::StoreError,
        asked: impl IntoIterator<Item = (&'l crate::limit::Limit, u64)>,
    ) -> Self {
        let mut err = Self::from(e);
        if let Self::Impossible { limit, .. } = &mut err
            && limit.is_empty()
            && let Some((l, _)) = asked
                .into_iter()
                .find(|(l, cost)| *cost > l.counter().spec().burst)
        {
            *limit = l.name.to_string();
        }
        err
    }
}

impl From<sluice_store::seam::StoreError> for DecideError {
    fn from(e: sluice_store::seam::StoreError) -> Self {
        match e {
            sluice_store::seam::StoreError::Impossible { cost, capacity } => Self::Impossible {
                limit: String::new(),
                cost,
                capacity,
            },
            sluice_store::seam::StoreError::ForeignCounter(limit) => {
                Self::Internal(format!("limit `{limit}` was registered with another store"))
            }
            other @ sluice_store::seam::StoreError::Unsupported { .. } => {
                Self::Internal(other.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sluice_core::{AlgorithmKind, Decision, LimitSpec, Rate};
    use sluice_store::KeyId;

    use super::{LimitResult, Results, Shadow};
    use crate::LimitLabels;

    fn result(labels: crate::Labels) -> LimitResult {
        LimitResult {
            spec: LimitSpec {
                algorithm: AlgorithmKind::Gcra,
                rate: Rate::per_second(1),
                burst: 1,
                nodelay: false,
            },
            decision: Decision::full(1),
            labels,
            key: KeyId(7),
        }
    }

    /// Results and shadow lists skip their drop when they own nothing:
    /// what they do own (counted labels, a list past two) is still freed.
    #[test]
    fn results_free_what_they_own() {
        let counted = Arc::new(LimitLabels::plain("counted".into(), "*"));
        let kept = LimitLabels::plain("kept".into(), "*").kept(None);
        for n in 0..4 {
            let mut results = Results::new();
            for i in 0..n {
                results.push(result(if i % 2 == 0 {
                    counted.clone().into()
                } else {
                    kept.clone()
                }));
            }
            let shadow = Shadow::from(vec![result(counted.clone().into()); n]);
            assert_eq!(Arc::strong_count(&counted), 1 + n.div_ceil(2) + n);
            drop((results, shadow));
            assert_eq!(Arc::strong_count(&counted), 1, "{n} results");
        }
        // Kept labels only, inline: nothing to free, nothing lost.
        let mut results = Results::new();
        results.push(result(kept.clone()));
        let copy = results.clone();
        drop(results);
        assert_eq!(copy[0].labels.limit.as_ref(), "kept");
    }
}
