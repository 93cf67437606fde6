//! A limit compiled once, in the one form the engine decides: its spec,
//! the counter a store keeps for it, its labels, and how it treats
//! priority classes and delays. The TOML policy ([`LimitDef`]) and the
//! Envoy rules both build these, and nothing about them is worked out again
//! per request.
//!
//! [`LimitDef`]: crate::LimitDef

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::LimitError;
use sluice_core::LimitSpec;
use sluice_store::seam::CounterDef;

use crate::labels::Labels;

/// A limit, ready to decide.
///
/// ```
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_policy::{Limit, LimitLabels};
/// let spec = LimitSpec {
///     algorithm: AlgorithmKind::Gcra,
///     rate: Rate::per_second(10),
///     burst: 20,
///     nodelay: true,
/// };
/// let limit = Limit::plain("limit/per-key", LimitLabels::named("per-key".into(), "*"), spec)?;
/// assert_eq!(limit.reserve_for(None), 0);
/// assert_eq!(limit.counter().spec().burst, 20);
/// # Ok::<(), sluice_core::LimitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Limit {
    /// The name shown in headers and problem bodies.
    pub name: Arc<str>,
    /// How metrics name it.
    pub labels: Labels,
    /// Algorithm, rate and burst, as the client sees them.
    pub spec: LimitSpec,
    /// What a store counts for it: the extended bucket of a delay limit
    /// ([`DelayDef`]), else its own, under its identity.
    pub counted: CounterDef,
    /// With `on_limit = "delay"`: how requests over the limit are held.
    pub delay: Option<DelayDef>,
    /// Priority classes: the most of the burst (percent, 1 to 99) that the
    /// keys of a plan may use; plans not listed may use all of it.
    pub max_share: BTreeMap<String, u8>,
    /// The plan the limit belongs to, if any.
    pub plan: Option<String>,
    /// With a `settle` rule: the cost charged at admission is an estimate,
    /// settled after the response (see [`settlement`](crate::settlement)).
    pub settle: Option<Arc<crate::settlement::Settlement>>,
}

impl Limit {
    /// A limit with no plan, classes or delay, counted under `id` (its
    /// identity in the store: a changed definition needs another id).
    pub fn plain(id: &str, labels: Labels, spec: LimitSpec) -> Result<Self, LimitError> {
        Ok(Self {
            name: labels.limit.clone(),
            labels,
            spec,
            counted: CounterDef::new(id, spec)?,
            delay: None,
            max_share: BTreeMap::new(),
            plan: None,
            settle: None,
        })
    }

    /// The cost a request of plan `class` must leave in the bucket: the
    /// part of the burst reserved for other classes (0 when unrestricted).
    pub fn reserve_for(&self, class: Option<&str>) -> u64 {
        let Some(share) = class.and_then(|c| self.max_share.get(c)) else {
            return 0;
        };
        let usable = u128::from(self.spec.burst) * u128::from(*share) / 100;
        self.spec.burst - u64::try_from(usable).unwrap_or(self.spec.burst)
    }

    /// The bucket the limit counts on: the extended one of a delay limit
    /// ([`DelayDef`]), else its own.
    pub fn counter(&self) -> &CounterDef {
        &self.counted
    }
}

/// `on_limit = "delay"`: a request over the limit that could pass within
/// `max_delay` is admitted now and held until its turn.
///
/// The limit counts on an *extended* bucket of `burst + extra` where
/// `extra` is what the rate refills in `max_delay`: a request that fits in
/// the first `burst` passes at once; one that fits only in the extension is
/// charged now (it reserves its slot) and held for the time the rate needs
/// to bring the bucket back to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayDef {
    /// The longest a request is held, in nanoseconds.
    pub max_delay: sluice_core::Nanos,
    /// The most requests held at once by this limit on this instance (with
    /// a shared store too: the bound is per instance).
    pub max_queue: usize,
    /// The extension: the cost the rate refills in `max_delay`.
    pub extra: u64,
    /// The extended bucket (`burst + extra`) that the limit counts on, in
    /// memory and in Redis.
    pub spec: LimitSpec,
}
