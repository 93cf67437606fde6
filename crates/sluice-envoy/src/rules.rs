//! The descriptor tree, compiled: which Sluice limit a request descriptor
//! meets.
//!
//! Matching follows the reference server: entry `i` of a request
//! descriptor is matched at depth `i` of the tree; a node whose `value`
//! equals the entry's value beats one with a `prefix*` value, which beats a
//! node without a value; there is no backtracking; and the descriptor is
//! limited by the `rate_limit` of the node where its last entry lands. Every
//! distinct list of entry values has its own counter.
//!
//! Each `rate_limit` becomes a Sluice limit of `requests_per_unit` per unit
//! with a burst of `requests_per_unit`: with the default fixed window, the
//! reference server's clock-aligned windows; with another algorithm, the same
//! long-run rate without the 2× burst across window boundaries.

use std::path::Path;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_policy::{Limit, LimitLabels};
use sluice_store::seam::{Counter, Store};

use crate::yaml_config::{YamlConfig, YamlDescriptor, YamlRateLimit};

/// Why a YAML config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The file could not be read.
    #[error("{file}: cannot read: {error}")]
    Read {
        /// The file.
        file: String,
        /// The error.
        error: std::io::Error,
    },
    /// The YAML is malformed or has unknown fields.
    #[error("{file}:{line}:{column}: {message}")]
    Yaml {
        /// The file.
        file: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// A descriptor's rate limit is unusable.
    #[error("{file}: descriptor `{path}`: {message}")]
    Limit {
        /// The file.
        file: String,
        /// The descriptor's path in the tree.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// The reference server's time units (`Unit` in the RLS protos).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    fn parse(text: &str) -> Option<Self> {
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
    pub labels: Arc<LimitLabels>,
    /// The unit, for statuses.
    pub unit: Unit,
    /// Requests per unit, for statuses.
    pub requests_per_unit: u32,
    /// Names of rules this one replaces.
    pub replaces: Vec<String>,
    /// Count but never refuse.
    pub shadow: bool,
    /// `None` for `unlimited`.
    pub limited: Option<Limited>,
}

impl Rule {
    /// Its name: `rate_limit.name`, else the node's path.
    pub fn name(&self) -> &Arc<str> {
        &self.labels.limit
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

#[derive(Debug)]
enum ValueMatch {
    Any,
    Prefix(String),
    Exact(String),
}

impl ValueMatch {
    /// How well `value` matches: `None` for no match, higher is better.
    fn score(&self, value: &str) -> Option<u8> {
        match self {
            Self::Exact(v) => (v == value).then_some(2),
            Self::Prefix(p) => value.starts_with(p.as_str()).then_some(1),
            Self::Any => Some(0),
        }
    }
}

#[derive(Debug)]
struct Node {
    key: String,
    value: ValueMatch,
    rule: Option<Arc<Rule>>,
    children: Vec<Node>,
}

/// A compiled config: one domain's descriptor tree.
#[derive(Debug)]
pub struct Rules {
    /// The domain.
    pub domain: String,
    nodes: Vec<Node>,
}

impl Rules {
    /// Loads a YAML file, creating each rule's limit in `store`.
    pub fn load(
        path: &Path,
        store: &dyn Store,
        algorithm: AlgorithmKind,
    ) -> Result<Self, RulesError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| RulesError::Read {
            file: file.clone(),
            error,
        })?;
        Self::from_yaml(&file, &text, store, algorithm)
    }

    /// Compiles YAML text; `file` names it in errors.
    pub fn from_yaml(
        file: &str,
        text: &str,
        store: &dyn Store,
        algorithm: AlgorithmKind,
    ) -> Result<Self, RulesError> {
        let config: YamlConfig = serde_yaml_ng::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
            RulesError::Yaml {
                file: file.to_owned(),
                line,
                column,
                message: e.to_string(),
            }
        })?;
        let ctx = Compile {
            file,
            domain: &config.domain,
            store,
            algorithm,
        };
        let nodes = config
            .descriptors
            .iter()
            .map(|d| ctx.node(d, ""))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            domain: config.domain,
            nodes,
        })
    }

    /// The rule each request descriptor meets, in order: `None` for none,
    /// and for a rule that another matched rule `replaces`.
    pub fn resolve<'r>(
        &'r self,
        descriptors: &[RateLimitDescriptor],
    ) -> Vec<Option<&'r Arc<Rule>>> {
        let mut found: Vec<Option<&Arc<Rule>>> = descriptors
            .iter()
            .map(|d| self.find(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))))
            .collect();
        let replaced: Vec<&str> = found
            .iter()
            .flatten()
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        for rule in &mut found {
            if rule.is_some_and(|r| replaced.contains(&&**r.name())) {
                *rule = None;
            }
        }
        found
    }

    /// The rule a request descriptor meets, given its `(key, value)` entries.
    pub fn find<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<&Arc<Rule>> {
        let mut level = &self.nodes;
        let mut found = None;
        for (key, value) in entries {
            let node = level
                .iter()
                .filter(|n| n.key == key)
                .filter_map(|n| n.value.score(value).map(|s| (s, n)))
                .max_by_key(|(s, _)| *s)
                .map(|(_, n)| n)?;
            found = Some(node);
            level = &node.children;
        }
        found?.rule.as_ref()
    }
}

struct Compile<'a> {
    file: &'a str,
    domain: &'a str,
    store: &'a dyn Store,
    algorithm: AlgorithmKind,
}

impl Compile<'_> {
    fn node(&self, d: &YamlDescriptor, parent: &str) -> Result<Node, RulesError> {
        let step = match &d.value {
            Some(v) => format!("{}_{v}", d.key),
            None => d.key.clone(),
        };
        let path = if parent.is_empty() {
            step
        } else {
            format!("{parent}.{step}")
        };
        let value = match &d.value {
            None => ValueMatch::Any,
            Some(v) => match v.strip_suffix('*') {
                Some(prefix) => ValueMatch::Prefix(prefix.to_owned()),
                None => ValueMatch::Exact(v.clone()),
            },
        };
        let rule = match &d.rate_limit {
            None => None,
            Some(rl) => Some(Arc::new(self.rule(rl, &path, d.shadow_mode)?)),
        };
        let children = d
            .descriptors
            .iter()
            .map(|c| self.node(c, &path))
            .collect::<Result<_, _>>()?;
        Ok(Node {
            key: d.key.clone(),
            value,
            rule,
            children,
        })
    }
}

impl Compile<'_> {
    /// The rule of the node at `path`: its unit, its Sluice limit (none
    /// for `unlimited`), what it replaces and whether it is in shadow mode.
    fn rule(&self, rl: &YamlRateLimit, path: &str, shadow: bool) -> Result<Rule, RulesError> {
        let err = |message: String| RulesError::Limit {
            file: self.file.to_owned(),
            path: path.to_owned(),
            message,
        };
        let unit_text = rl.unit.as_deref().unwrap_or("");
        let unit = match Unit::parse(unit_text) {
            Some(u) => u,
            None if rl.unlimited => Unit::Second,
            None => {
                return Err(err(format!(
                    "unit `{unit_text}`: expected second, minute, hour, day, week, month or year"
                )));
            }
        };
        let name: Arc<str> = sanitize(rl.name.as_deref().unwrap_or(path)).into();
        let labels = LimitLabels::named(name, "envoy");
        let limited = if rl.unlimited {
            None
        } else {
            let rpu = u64::from(rl.requests_per_unit);
            let rate = Rate::new(rpu, unit.seconds() * 1_000_000_000)
                .ok_or_else(|| err("requests_per_unit must be at least 1".into()))?;
            let spec = LimitSpec {
                algorithm: self.algorithm,
                rate,
                burst: rpu,
                nodelay: true,
            };
            let id = format!(
                "envoy:{}/{path}/{}/{rate}/{rpu}",
                self.domain,
                self.algorithm.name()
            );
            let limit = Limit::plain(&id, labels.clone(), spec).map_err(|e| err(e.to_string()))?;
            Some(Limited {
                counter: self.store.counter(limit.counted.clone()),
                limit,
            })
        };
        Ok(Rule {
            labels,
            unit,
            requests_per_unit: rl.requests_per_unit,
            replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
            shadow,
            limited,
        })
    }
}

/// A limit name usable in header fields: letters, digits and `-_.:/`.
fn sanitize(name: &str) -> String {
    let s: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.:/".contains(c) {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    if s.is_empty() { "limit".into() } else { s }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        Rules::from_yaml("t.yaml", YAML, &store, AlgorithmKind::FixedWindow).unwrap()
    }

    fn name(r: &Rules, entries: &[(&str, &str)]) -> Option<String> {
        r.find(entries.iter().copied())
            .map(|r| r.name().to_string())
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
    fn units_and_unlimited() {
        let r = rules();
        let rule = r.find([("remote_address", "1.2.3.4")]).unwrap();
        assert_eq!(rule.unit, Unit::Second);
        let spec = rule.limited.as_ref().unwrap().limit.spec;
        assert_eq!((spec.rate.amount(), spec.burst), (10, 10));
        assert!(r.find([("internal", "x")]).unwrap().limited.is_none());
    }

    #[test]
    fn errors_name_the_place() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let e = Rules::from_yaml(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n",
            &store,
            AlgorithmKind::FixedWindow,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("bad.yaml:4:"), "{e}");
        let e = Rules::from_yaml(
            "bad.yaml",
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: { unit: fortnight, requests_per_unit: 1 }\n",
            &store,
            AlgorithmKind::FixedWindow,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("descriptor `a`") && e.contains("fortnight"),
            "{e}"
        );
    }
}
