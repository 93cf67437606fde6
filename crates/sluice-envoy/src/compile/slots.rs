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
//! without `max_in_flight`, or one that is not a positive duration.

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

#[cfg(test)]
mod tests {
    use super::super::{Loading, compile_into};
    use crate::rules::Rules;
    use sluice_store::{MemoryStore, MemoryStoreConfig};

    fn compile(text: &str) -> Result<Rules, String> {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let mut rules = Rules::default();
        compile_into(&mut rules, "c.yaml", text, &store, &Loading::default())
            .map(|()| rules)
            .map_err(|e| e.to_string())
    }

    /// A file whose one rule has these lines (6 spaces in).
    fn with(lines: &str) -> String {
        format!("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n{lines}")
    }

    fn refused(lines: &str, starts: &str, says: &str) {
        let e = compile(&with(lines)).expect_err("refused");
        assert!(e.starts_with(starts) && e.contains(says), "{e}");
    }

    #[test]
    fn a_concurrency_rule_is_a_concurrency_limit() {
        let rules = compile(&with(
            "      max_in_flight: 3\n      lease: 30s\n      name: up\n",
        ))
        .unwrap();
        let rule = rules.find("d", [("a", "x")]).unwrap().rule;
        assert!(rule.in_flight());
        assert_eq!((rule.unit, rule.requests_per_unit), (None, 3));
        let spec = rule.limited().unwrap().limit.spec;
        assert_eq!(spec.algorithm, sluice_core::AlgorithmKind::Concurrency);
        assert_eq!((spec.burst, spec.window()), (3, 30_000_000_000));
        // Without a lease, the TOML limits' default.
        let rules = compile(&with("      max_in_flight: 1\n")).unwrap();
        let spec = rules
            .find("d", [("a", "x")])
            .unwrap()
            .rule
            .limited()
            .unwrap()
            .limit
            .spec;
        let default = sluice_core::parse_duration(sluice_policy::DEFAULT_LEASE).unwrap();
        assert_eq!(spec.window(), default);
        // A rate rule is none.
        let rules = compile(&with("      unit: second\n      requests_per_unit: 1\n")).unwrap();
        assert!(!rules.find("d", [("a", "x")]).unwrap().rule.in_flight());
    }

    #[test]
    fn a_rule_is_a_rate_or_a_concurrency_limit_never_both_nor_neither() {
        let (max, at) = (
            "      max_in_flight: 2\n",
            "c.yaml:6:7: `descriptors[0].rate_limit.",
        );
        refused(
            &format!("{max}      unit: second\n"),
            &format!("{at}unit`: "),
            "takes no unit",
        );
        refused(
            &format!("{max}      requests_per_unit: 5\n"),
            &format!("{at}requests_per_unit`: "),
            "takes no requests_per_unit",
        );
        refused(
            &format!("{max}      unlimited: true\n"),
            &format!("{at}unlimited`: "),
            "takes no unlimited",
        );
        refused(
            "      name: n\n",
            "c.yaml:4:5: `descriptors[0].rate_limit.unit`: ",
            "or max_in_flight, for a concurrency limit",
        );
    }

    #[test]
    fn slots_and_leases_are_checked() {
        let at = "c.yaml:5:7: `descriptors[0].rate_limit.";
        refused(
            "      max_in_flight: 0\n",
            &format!("{at}max_in_flight`: "),
            "at least 1",
        );
        refused(
            "      unit: second\n      requests_per_unit: 1\n      lease: 30s\n",
            "c.yaml:7:7: `descriptors[0].rate_limit.lease`: ",
            "set max_in_flight",
        );
        let lease = "c.yaml:6:7: `descriptors[0].rate_limit.lease`: ";
        refused(
            "      max_in_flight: 1\n      lease: soon\n",
            lease,
            "invalid lease `soon`",
        );
        refused(
            "      max_in_flight: 1\n      lease: 0s\n",
            lease,
            "invalid lease `0s`",
        );
        refused("      max_in_flight: -1\n", "c.yaml:5:", "max_in_flight");
    }
}
