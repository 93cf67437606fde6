//! The descriptor trees, compiled: which Sluice limit a request descriptor
//! meets, in each domain.
//!
//! Matching follows the reference server (its `GetLimit`): entry `i` of a
//! request descriptor is matched at depth `i` of its domain's tree; at each
//! level a node whose `value` equals the entry's value wins, then the first
//! node (in file order) whose wildcard [pattern](crate::pattern) matches
//! it, then a node without a `value`; there is no backtracking; and the
//! descriptor is limited by the `rate_limit` of the node where its last
//! entry lands. Every distinct list of entry values has its own counter,
//! except that a value matched by a `share_threshold` wildcard counts as
//! the pattern itself: all the values it matches share one counter.
//!
//! Each `rate_limit` becomes a Sluice limit of `requests_per_unit` per unit
//! with a burst of `requests_per_unit`: with the default fixed window, the
//! reference server's clock-aligned windows; with another algorithm, the same
//! long-run rate without the 2× burst across window boundaries. A limit of
//! 0 requests refuses every request that meets it.
//!
//! A `rate_limit` with `max_in_flight` (Sluice's own) becomes a
//! concurrency limit instead: at most `max_in_flight` requests in flight
//! per descriptor, each taking a slot when it is admitted and giving it back
//! with a release (a descriptor with `is_negative_hits`), or when its
//! `lease` ends on a store that keeps leases.
//!
//! Rules are compiled from YAML files by [`compile`](crate::compile).

/// The maps of a tree: their keys come from the config, so a fast hash
/// with a random seed is enough (a request's values only look up).
type Map<V> = std::collections::HashMap<String, V, foldhash::fast::RandomState>;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::google::protobuf::Struct;
use sluice_policy::{Labels, Limit};
use sluice_store::seam::Counter;
use smallvec::SmallVec;

use crate::pattern::Pattern;

pub use crate::compile::RulesError;

/// The reference server's time units (`Unit` in the RLS protos).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// 1 s.
    Second = 1,
    /// 60 s.
    Minute = 2,
    /// 3600 s.
    Hour = 3,
    /// 86 400 s.
    Day = 4,
    /// 30 days, as in the reference server.
    Month = 5,
    /// 365 days, as in the reference server.
    Year = 6,
    /// 7 days.
    Week = 7,
}

impl Unit {
    /// A unit's name in a config, in any case.
    pub fn parse(text: &str) -> Option<Self> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Self::Second,
            "minute" => Self::Minute,
            "hour" => Self::Hour,
            "day" => Self::Day,
            "month" => Self::Month,
            "year" => Self::Year,
            "week" => Self::Week,
            _ => return None,
        })
    }

    /// A unit as the RLS protos number it (0 is `UNKNOWN`: `None`).
    pub fn from_proto(n: i32) -> Option<Self> {
        Some(match n {
            1 => Self::Second,
            2 => Self::Minute,
            3 => Self::Hour,
            4 => Self::Day,
            5 => Self::Month,
            6 => Self::Year,
            7 => Self::Week,
            _ => return None,
        })
    }

    /// The unit in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Self::Second => 1,
            Self::Minute => 60,
            Self::Hour => 3_600,
            Self::Day => 86_400,
            Self::Week => 7 * 86_400,
            Self::Month => 30 * 86_400,
            Self::Year => 365 * 86_400,
        }
    }
}

/// The limit at one node of the tree.
#[derive(Debug)]
pub struct Rule {
    /// How metrics and logs name it (built once, shared by every decision);
    /// its name is [`name`](Self::name).
    pub labels: Labels,
    /// Its place in the tree (`message_type_marketing.to_number`): the key
    /// of its statistics, as the reference server names them.
    pub path: Arc<str>,
    /// `detailed_metric`: statistics per request value.
    pub detailed: bool,
    /// `rate_limit.name` as the file gives it (empty when absent).
    pub given_name: String,
    /// The unit, for statuses; `None` for a concurrency limit, which counts
    /// requests in flight, not per any unit of time.
    pub unit: Option<Unit>,
    /// Requests per unit, for statuses (`max_in_flight` for a concurrency
    /// limit).
    pub requests_per_unit: u32,
    /// Names of rules this one replaces.
    pub replaces: Vec<String>,
    /// Count but never refuse.
    pub shadow: bool,
    /// Over its limit, refuse only when every quota-mode descriptor of the
    /// request is.
    pub quota: bool,
    /// What the rule does with a request.
    pub kind: RuleKind,
    /// `metadata`, for the response's `dynamic_metadata`.
    pub metadata: Option<Struct>,
    /// Its statistics series once found (a rule of a config belongs to one
    /// domain); `None` for a per-request limit, which every domain shares.
    pub(crate) stats: Option<std::sync::OnceLock<Arc<crate::stats::Counters>>>,
}

/// What a rule does with a request.
#[derive(Debug)]
pub enum RuleKind {
    /// `unlimited: true`: nothing is counted.
    Unlimited,
    /// `requests_per_unit: 0`: every request is over the limit.
    Zero,
    /// Counted on a Sluice limit.
    Counted(Box<Limited>),
}

impl Rule {
    /// Its name: `rate_limit.name`, else the node's path.
    pub fn name(&self) -> &Arc<str> {
        &self.labels.limit
    }

    /// Its Sluice limit, when it counts.
    pub fn limited(&self) -> Option<&Limited> {
        match &self.kind {
            RuleKind::Counted(l) => Some(l),
            RuleKind::Unlimited | RuleKind::Zero => None,
        }
    }

    /// Whether it is a concurrency limit (`max_in_flight`): requests in
    /// flight, taken when admitted and given back by a release.
    pub fn in_flight(&self) -> bool {
        self.limited()
            .is_some_and(|l| l.limit.spec.algorithm == sluice_core::AlgorithmKind::Concurrency)
    }
}

/// A rule's Sluice limit.
#[derive(Debug)]
pub struct Limited {
    /// The limit, as the engine decides it.
    pub limit: Limit,
    /// Its counter in the store.
    pub counter: Counter,
}

/// One node of a tree.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) rule: Option<Arc<Rule>>,
    pub(crate) children: Level,
    /// For a wildcard node with `share_threshold`: its pattern's text.
    pub(crate) shared: Option<String>,
    /// The configured `value`, if any.
    pub(crate) value: Option<String>,
    /// `value_to_metric`: the request's value in statistics keys.
    pub(crate) value_to_metric: bool,
}

/// How an entry met its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Matched {
    Exact,
    Wildcard,
    Any,
}

/// The nodes of one level, by entry key.
#[derive(Debug, Default)]
pub(crate) struct Level {
    pub(crate) by_key: Map<Keyed>,
}

/// The nodes of one level for one entry key.
#[derive(Debug, Default)]
pub(crate) struct Keyed {
    pub(crate) exact: Map<Node>,
    /// In file order: the first that matches wins.
    pub(crate) wildcards: Vec<(Pattern, Node)>,
    pub(crate) any: Option<Box<Node>>,
}

impl Level {
    /// The node an entry lands on, and how.
    fn find(&self, key: &str, value: &str) -> Option<(&Node, Matched)> {
        let keyed = self.by_key.get(key)?;
        if let Some(n) = keyed.exact.get(value) {
            return Some((n, Matched::Exact));
        }
        if let Some((_, n)) = keyed.wildcards.iter().find(|(p, _)| p.matches(value)) {
            return Some((n, Matched::Wildcard));
        }
        keyed.any.as_deref().map(|n| (n, Matched::Any))
    }
}

/// The rule a request descriptor meets, and how its counter is named.
#[derive(Debug, Clone)]
pub struct Found<'r> {
    /// The rule.
    pub rule: &'r Arc<Rule>,
    /// The entries matched by a `share_threshold` wildcard, with its
    /// pattern: they count as the pattern, not as their value.
    pub shared: SmallVec<[(usize, &'r str); 2]>,
    /// The key of its statistics when request values are part of it
    /// (`detailed_metric`, `value_to_metric`); else the rule's
    /// [`path`](Rule::path).
    pub metric_key: Option<String>,
}

/// Compiled configs: each domain's descriptor tree.
#[derive(Debug, Default)]
pub struct Rules {
    pub(crate) domains: Map<Level>,
}

impl Rules {
    /// Whether a domain is configured.
    pub fn has_domain(&self, domain: &str) -> bool {
        self.domains.contains_key(domain)
    }

    /// The configured domains, sorted.
    pub fn domains(&self) -> Vec<&str> {
        let mut all: Vec<&str> = self.domains.keys().map(String::as_str).collect();
        all.sort_unstable();
        all
    }

    /// The rule each request descriptor meets, in order: `None` for none,
    /// and for a rule that another matched rule `replaces`.
    pub fn resolve<'r>(
        &'r self,
        domain: &str,
        descriptors: &[RateLimitDescriptor],
    ) -> Vec<Option<Found<'r>>> {
        self.resolve_with(domain, descriptors, &[])
    }

    /// [`resolve`](Self::resolve), with the per-request limits of some
    /// descriptors (`overrides[i]`) in place of their config rules: such a
    /// descriptor neither replaces nor is replaced, as in the reference
    /// server (whose overrides have no name and no `replaces`).
    pub fn resolve_with<'r>(
        &'r self,
        domain: &str,
        descriptors: &[RateLimitDescriptor],
        overrides: &'r [Option<Arc<Rule>>],
    ) -> Vec<Option<Found<'r>>> {
        let Some(tree) = self.domains.get(domain) else {
            return vec![None; descriptors.len()];
        };
        let mut found: Vec<Option<Found<'r>>> = descriptors
            .iter()
            .enumerate()
            .map(|(i, d)| match overrides.get(i).and_then(Option::as_ref) {
                Some(rule) => Some(Found {
                    rule,
                    shared: SmallVec::new(),
                    metric_key: None,
                }),
                None => find_in(
                    tree,
                    d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())),
                ),
            })
            .collect();
        let replaced: Vec<&str> = found
            .iter()
            .flatten()
            .flat_map(|f| f.rule.replaces.iter().map(String::as_str))
            .collect();
        if !replaced.is_empty() {
            for f in &mut found {
                // As in the reference server: only a named rule is replaced,
                // and never an unlimited one (it is set aside first).
                if f.as_ref().is_some_and(|f| {
                    !f.rule.given_name.is_empty()
                        && !matches!(f.rule.kind, RuleKind::Unlimited)
                        && replaced.contains(&f.rule.given_name.as_str())
                }) {
                    *f = None;
                }
            }
        }
        found
    }

    /// The rule a request descriptor meets in `domain`, given its
    /// `(key, value)` entries.
    pub fn find<'a>(
        &self,
        domain: &str,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Found<'_>> {
        find_in(self.domains.get(domain)?, entries)
    }
}

fn find_in<'r, 'a>(
    tree: &'r Level,
    entries: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<Found<'r>> {
    let mut level = tree;
    let mut shared = SmallVec::new();
    let mut steps: SmallVec<[Step<'r, 'a>; 4]> = SmallVec::new();
    for (i, (key, value)) in entries.into_iter().enumerate() {
        let (node, how) = level.find(key, value)?;
        if let Some(pattern) = &node.shared {
            shared.push((i, pattern.as_str()));
        }
        steps.push(Step {
            key,
            value,
            node,
            how,
        });
        level = &node.children;
    }
    let rule = steps.last()?.node.rule.as_ref()?;
    Some(Found {
        rule,
        shared,
        metric_key: metric_key(rule, &steps),
    })
}

/// One entry of a request descriptor, matched.
struct Step<'r, 'a> {
    key: &'a str,
    value: &'a str,
    node: &'r Node,
    how: Matched,
}

/// The statistics key of a match that names request values, as the
/// reference server builds it: with `detailed_metric`, every entry's
/// `key_value`; with `value_to_metric` on a node met by a wildcard or by
/// key alone, that entry's `key_value`; a `share_threshold` wildcard's
/// entry as `key_pattern`. `None` when it is the rule's path.
fn metric_key(rule: &Rule, steps: &[Step<'_, '_>]) -> Option<String> {
    let by_value = |s: &Step<'_, '_>| s.node.value_to_metric && s.how != Matched::Exact;
    if !rule.detailed && !steps.iter().any(by_value) {
        return None;
    }
    let mut out = String::new();
    for s in steps {
        if !out.is_empty() {
            out.push('.');
        }
        let shown = match (&s.node.shared, s.how) {
            (Some(pattern), Matched::Wildcard) => Some(pattern.as_str()),
            _ if rule.detailed || by_value(s) || s.how == Matched::Exact => Some(s.value),
            _ => s.node.value.as_deref(),
        };
        out.push_str(s.key);
        if let Some(v) = shown.filter(|v| !v.is_empty()) {
            out.push('_');
            out.push_str(v);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::AlgorithmKind;
    use sluice_store::{MemoryStore, MemoryStoreConfig};

    const YAML: &str = r#"
domain: edge
descriptors:
  - key: remote_address
    rate_limit: { unit: second, requests_per_unit: 10 }
  - key: api_key
    value: premium-*
    rate_limit: { unit: minute, requests_per_unit: 600, name: premium }
  - key: api_key
    value: premium-gold
    rate_limit: { unit: minute, requests_per_unit: 6000, name: gold }
  - key: api_key
    rate_limit: { unit: minute, requests_per_unit: 60 }
    descriptors:
      - key: path
        value: /export
        rate_limit: { unit: hour, requests_per_unit: 5 }
  - key: internal
    rate_limit: { unlimited: true }
"#;

    fn rules() -> Rules {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        Rules::from_yaml("t.yaml", YAML, &store, &AlgorithmKind::FixedWindow.into()).unwrap()
    }

    fn name(r: &Rules, entries: &[(&str, &str)]) -> Option<String> {
        r.find("edge", entries.iter().copied())
            .map(|f| f.rule.name().to_string())
    }

    #[test]
    fn exact_beats_prefix_beats_key_only() {
        let r = rules();
        assert_eq!(
            name(&r, &[("api_key", "premium-gold")]).as_deref(),
            Some("gold")
        );
        assert_eq!(
            name(&r, &[("api_key", "premium-x")]).as_deref(),
            Some("premium")
        );
        assert_eq!(
            name(&r, &[("api_key", "free-1")]).as_deref(),
            Some("api_key")
        );
    }

    #[test]
    fn depth_must_match_and_unknown_keys_match_nothing() {
        let r = rules();
        assert_eq!(
            name(&r, &[("api_key", "k"), ("path", "/export")]).as_deref(),
            Some("api_key.path_/export")
        );
        assert_eq!(name(&r, &[("api_key", "k"), ("path", "/other")]), None);
        assert_eq!(name(&r, &[("nope", "x")]), None);
        assert_eq!(name(&r, &[]), None);
    }

    #[test]
    fn an_unlimited_rule_is_never_replaced() {
        // service/ratelimit.go sets unlimited limits aside before it drops
        // the replaced ones.
        use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
        let yaml = "domain: r\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, name: free}\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: free}]}\n";
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let r =
            Rules::from_yaml("r.yaml", yaml, &store, &AlgorithmKind::FixedWindow.into()).unwrap();
        let d = |k: &str| RateLimitDescriptor {
            entries: vec![Entry {
                key: k.into(),
                value: "x".into(),
            }],
            ..Default::default()
        };
        let found = r.resolve("r", &[d("a"), d("b")]);
        assert!(found.iter().all(Option::is_some), "{found:?}");
    }

    #[test]
    fn units_and_unlimited() {
        let r = rules();
        let rule = r
            .find("edge", [("remote_address", "1.2.3.4")])
            .unwrap()
            .rule;
        assert_eq!(rule.unit, Some(Unit::Second));
        let spec = rule.limited().unwrap().limit.spec;
        assert_eq!((spec.rate.amount(), spec.burst), (10, 10));
        let unlimited = r.find("edge", [("internal", "x")]).unwrap().rule;
        assert!(matches!(unlimited.kind, RuleKind::Unlimited));
        assert!(r.find("other", [("internal", "x")]).is_none());
    }

    #[test]
    fn errors_name_the_place() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let e = Rules::from_yaml(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n",
            &store,
            &AlgorithmKind::FixedWindow.into(),
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("bad.yaml:4:"), "{e}");
        let e = Rules::from_yaml(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
            &store,
            &AlgorithmKind::FixedWindow.into(),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("bad.yaml:4:19: `descriptors[0].rate_limit.unit`: ")
                && e.contains("fortnight"),
            "{e}"
        );
    }
}
