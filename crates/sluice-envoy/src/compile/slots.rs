//! A concurrency rule: `rate_limit: {max_in_flight: N, lease: 30s}`
//! (Sluice's own fields) instead of `unit` and `requests_per_unit`. It
//! becomes a Sluice concurrency limit, as `algorithm = "concurrency"` in
//! the TOML policy: at most N requests in flight per descriptor, each slot
//! given back by a release (a descriptor with `is_negative_hits`) or, on a
//! store that keeps leases, when its lease ends (`lease`, by default the
//! TOML limits' [`DEFAULT_LEASE`]).
//!
//! Refused, at the field: `max_in_flight` beside `unit`,
//! `requests_per_unit` or `unlimited`; `max_in_flight: 0`; a `lease`
//! without `max_in_flight`, one that is not a duration, or one of 0.

use sluice_core::{AlgorithmKind, LimitSpec, Nanos, Rate};
use sluice_policy::{DEFAULT_LEASE, Labels, Limit};
use sluice_store::seam::Store;

use super::Compile;
use crate::rules::{Limited, RulesError};
use crate::yaml_config::YamlRateLimit;
use crate::yaml_locate::Step;

/// A concurrency rule's most in flight and lease.
#[derive(Debug, Clone, Copy)]
pub(super) struct Slots {
    pub(super) max: u32,
    pub(super) lease: Nanos,
}

impl Compile<'_> {
    /// The slots of a concurrency rule (`None` for a rate rule), with the
    /// rule's fields checked; `at` is the path of its `rate_limit`.
    pub(super) fn slots(
        &self,
        rl: &YamlRateLimit,
        at: &[Step<'_>],
    ) -> Result<Option<Slots>, RulesError> {
        let field = |f: &'static str| {
            let mut p = at.to_vec();
            p.push(Step::Field(f));
            p
        };
        let Some(max) = rl.max_in_flight else {
            if rl.lease.is_some() {
                return Err(self.invalid(
                    &field("lease"),
                    "a lease is for a concurrency limit: set max_in_flight, or remove lease",
                ));
            }
            return Ok(None);
        };
        for (name, present) in [
            ("unit", rl.unit.is_some()),
            ("requests_per_unit", rl.requests_per_unit.is_some()),
            ("unlimited", rl.unlimited),
        ] {
            if present {
                return Err(self.invalid(
                    &field(name),
                    &format!("a concurrency limit (max_in_flight) takes no {name}: it counts requests in flight, not requests per unit"),
                ));
            }
        }
        if max == 0 {
            return Err(self.invalid(
                &field("max_in_flight"),
                "max_in_flight must be at least 1 (requests_per_unit: 0 refuses every request)",
            ));
        }
        let text = rl.lease.as_deref().unwrap_or(DEFAULT_LEASE);
        let lease = sluice_core::parse_duration(text)
            .map_err(|e| self.invalid(&field("lease"), &format!("invalid lease `{text}`: {e}")))?;
        if lease == 0 {
            return Err(self.invalid(&field("lease"), "lease must be longer than 0"));
        }
        Ok(Some(Slots { max, lease }))
    }
}

/// A Sluice concurrency limit of `slots` under counter id `id` (with the
/// algorithm and its spec appended, as [`limited`](super::limited) names
/// rate limits), its counter registered in `store`, with the labels
/// `labels` gives for its spec.
pub(super) fn slots_limited(
    id: &str,
    slots: Slots,
    labels: impl FnOnce(&LimitSpec) -> Labels,
    store: &dyn Store,
) -> Result<Limited, String> {
    let max = u64::from(slots.max);
    // `max` per lease: the spec's window is the lease.
    let rate = Rate::new(max, slots.lease).ok_or_else(|| "lease: out of range".to_owned())?;
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Concurrency,
        rate,
        burst: max,
        nodelay: false,
    };
    spec.build().map_err(|e| format!("lease: {e}"))?;
    let id = format!("{id}/{}/{rate}/{max}", AlgorithmKind::Concurrency.name());
    let limit = Limit::plain(&id, labels(&spec), spec).map_err(|e| e.to_string())?;
    Ok(Limited {
        counter: store.counter(limit.counted.clone()),
        limit,
    })
}
