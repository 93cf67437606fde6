//! envoyproxy/ratelimit YAML in, [`Rules`] out: each file's domain and its
//! descriptor tree, checked as the reference server checks them (its
//! `loadDescriptors`). What it refuses, Sluice refuses, each error naming
//! the file, line, column and field:
//!
//! - a file without a `domain`, or a domain another file defines;
//! - a descriptor without a `key`, or two with the same `key` and `value`
//!   at one level;
//! - an unknown field (anywhere but inside `metadata`);
//! - a `unit` that is not second, minute, hour, day, week, month or year,
//!   and any `unit` beside `unlimited: true`;
//! - a `replaces` entry without a name, or naming its own limit;
//! - `share_threshold` on a value without `*`;
//! - `metadata` that is not a map of plain YAML values;
//! - Sluice's own concurrency rules (`max_in_flight`, `lease`) beside
//!   `unit`, `requests_per_unit` or `unlimited`, with `max_in_flight: 0`,
//!   or a `lease` without `max_in_flight` or that is not a duration
//!   (see `compile/slots.rs`).

use std::collections::hash_map::Entry;
use std::sync::Arc;

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_policy::{Labels, Limit, LimitLabels};
use sluice_store::seam::Store;

use crate::pattern::Pattern;
use crate::rules::{Keyed, Level, Limited, Node, Rule, RuleKind, Rules, Unit};
use crate::yaml_config::{YamlConfig, YamlDescriptor, YamlRateLimit};
use crate::yaml_locate::{Step, locate};

mod metadata;
mod slots;
use metadata::to_struct;

/// Why a YAML config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// A file or directory could not be read.
    #[error("{file}: cannot read: {error}")]
    Read {
        /// The file.
        file: String,
        /// The error.
        error: std::io::Error,
    },
    /// The YAML is malformed, or a field is unknown or of the wrong type.
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
    /// A field's value is refused (as the reference server refuses it).
    #[error("{file}:{line}:{column}: `{field}`: {message}")]
    Invalid {
        /// The file.
        file: String,
        /// 1-based line (0 when unknown).
        line: usize,
        /// 1-based column (0 when unknown).
        column: usize,
        /// The field, as a path from the top of the file
        /// (`descriptors[0].rate_limit.unit`).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The files as a whole cannot be loaded: too many, too large, or
    /// still changing.
    #[error("{file}: {message}")]
    Files {
        /// The file or directory.
        file: String,
        /// What is too large.
        message: String,
    },
}

/// How configs are compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loading {
    /// The algorithm of every limit (`fixed_window`, the reference
    /// server's clock-aligned windows, by default).
    pub algorithm: AlgorithmKind,
    /// A file may add to a domain another file defines (the reference
    /// server's `MERGE_DOMAIN_CONFIG`); otherwise that is an error.
    pub merge_domains: bool,
    /// Every rule of the files is in shadow mode (the reference server's
    /// `SHADOW_MODE`): counted, never refusing. A per-request `limit`
    /// override still refuses, as there.
    pub shadow_mode: bool,
}

impl Default for Loading {
    fn default() -> Self {
        Self {
            algorithm: AlgorithmKind::FixedWindow,
            merge_domains: false,
            shadow_mode: false,
        }
    }
}

impl From<AlgorithmKind> for Loading {
    fn from(algorithm: AlgorithmKind) -> Self {
        Self {
            algorithm,
            ..Self::default()
        }
    }
}

/// Compiles one file's text into `rules`, creating each limit's counter in
/// `store`; `file` names it in errors. A domain already in `rules` is an
/// error, as in the reference server, unless `loading` merges domains.
pub fn compile_into(
    rules: &mut Rules,
    file: &str,
    text: &str,
    store: &dyn Store,
    loading: &Loading,
) -> Result<(), RulesError> {
    let config: YamlConfig = serde_yaml_ng::from_str(text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        RulesError::Yaml {
            file: file.to_owned(),
            line,
            column,
            message: e.to_string(),
        }
    })?;
    compile_config(rules, file, text, &config, store, loading)
}

/// Compiles a config read from `text` (for the places of errors; empty
/// for a config that came as a message, whose errors name no line) into
/// `rules`, as [`compile_into`] does.
pub fn compile_config(
    rules: &mut Rules,
    file: &str,
    text: &str,
    config: &YamlConfig,
    store: &dyn Store,
    loading: &Loading,
) -> Result<(), RulesError> {
    let ctx = Compile {
        file,
        text,
        domain: &config.domain,
        store,
        algorithm: loading.algorithm,
        shadow_mode: loading.shadow_mode,
    };
    if config.domain.is_empty() {
        return Err(ctx.invalid(
            &[Step::Field("domain")],
            "config file cannot have empty domain",
        ));
    }
    let mut at = vec![Step::Field("descriptors")];
    let tree = match rules.domains.entry(config.domain.clone()) {
        Entry::Occupied(_) if !loading.merge_domains => {
            return Err(ctx.invalid(
                &[Step::Field("domain")],
                &format!(
                    "duplicate domain `{}`: another file defines it",
                    config.domain
                ),
            ));
        }
        Entry::Occupied(slot) => slot.into_mut(),
        Entry::Vacant(slot) => slot.insert(Level::default()),
    };
    ctx.level_into(tree, &config.descriptors, "", &mut at)
}

struct Compile<'a> {
    file: &'a str,
    text: &'a str,
    domain: &'a str,
    store: &'a dyn Store,
    algorithm: AlgorithmKind,
    /// Every rule in shadow mode.
    shadow_mode: bool,
}

impl Compile<'_> {
    /// An error at the field `at` leads to.
    fn invalid(&self, at: &[Step<'_>], message: &str) -> RulesError {
        let (line, column) = locate(self.text, at).unwrap_or((0, 0));
        RulesError::Invalid {
            file: self.file.to_owned(),
            line,
            column,
            field: field_path(at),
            message: message.to_owned(),
        }
    }

    /// One level of the tree: `descriptors` at `at`, under the node at
    /// `parent` (its path in the tree, for names and counter ids), added
    /// to `level`.
    fn level_into<'y>(
        &self,
        level: &mut Level,
        descriptors: &'y [YamlDescriptor],
        parent: &str,
        at: &mut Vec<Step<'y>>,
    ) -> Result<(), RulesError> {
        for (i, d) in descriptors.iter().enumerate() {
            at.push(Step::Index(i));
            self.descriptor(level, d, parent, at)?;
            at.pop();
        }
        Ok(())
    }

    fn descriptor<'y>(
        &self,
        level: &mut Level,
        d: &'y YamlDescriptor,
        parent: &str,
        at: &mut Vec<Step<'y>>,
    ) -> Result<(), RulesError> {
        let here = |field: &'static str| {
            let mut p = at.clone();
            p.push(Step::Field(field));
            p
        };
        if d.key.is_empty() {
            return Err(self.invalid(&here("key"), "descriptor has empty key"));
        }
        // An empty value is no value, as in the reference server (and as a
        // message from xDS has it): the node matches any value.
        let value = d.value.as_deref().filter(|v| !v.is_empty());
        let step = match value {
            Some(v) => format!("{}_{v}", d.key),
            None => d.key.clone(),
        };
        let path = if parent.is_empty() {
            step.clone()
        } else {
            format!("{parent}.{step}")
        };
        let pattern = value.map(Pattern::new);
        if d.share_threshold && !pattern.as_ref().is_some_and(Pattern::is_wildcard) {
            return Err(self.invalid(
                &here("share_threshold"),
                &format!("share_threshold can only be used with wildcard values (containing `*`), but found `{step}`"),
            ));
        }
        let rule = match &d.rate_limit {
            None => None,
            Some(rl) => {
                let mut rl_at = here("rate_limit");
                Some(Arc::new(self.rule(d, rl, &path, &mut rl_at)?))
            }
        };
        at.push(Step::Field("descriptors"));
        let mut children = Level::default();
        self.level_into(&mut children, &d.descriptors, &path, at)?;
        at.pop();
        let node = Node {
            rule,
            children,
            shared: value.filter(|_| d.share_threshold).map(str::to_owned),
            value: value.map(str::to_owned),
            value_to_metric: d.value_to_metric,
        };
        let keyed: &mut Keyed = level.by_key.entry(d.key.clone()).or_default();
        let duplicate = match pattern {
            None => keyed.any.replace(Box::new(node)).is_some(),
            Some(Pattern::Exact(v)) => keyed.exact.insert(v, node).is_some(),
            Some(p) => {
                let seen = keyed.wildcards.iter().any(|(q, _)| *q == p);
                if !seen {
                    keyed.wildcards.push((p, node));
                }
                seen
            }
        };
        if duplicate {
            return Err(self.invalid(
                at,
                &format!(
                    "duplicate descriptor composite key `{}.{path}`",
                    self.domain
                ),
            ));
        }
        Ok(())
    }

    /// A rate limit's unit (`second` for an `unlimited` one, which must
    /// name none).
    fn unit<'y>(&self, rl: &'y YamlRateLimit, at: &mut Vec<Step<'y>>) -> Result<Unit, RulesError> {
        let unit_text = rl.unit.as_deref().unwrap_or("");
        at.push(Step::Field("unit"));
        let unit = match (Unit::parse(unit_text), rl.unlimited) {
            (Some(_), true) => {
                return Err(self.invalid(at, "should not specify rate limit unit when unlimited"));
            }
            (None, true) => Unit::Second,
            (Some(u), false) => u,
            (None, false) => {
                return Err(self.invalid(
                    at,
                    &format!("invalid rate limit unit `{unit_text}`: expected second, minute, hour, day, week, month or year (or max_in_flight, for a concurrency limit)"),
                ));
            }
        };
        at.pop();
        Ok(unit)
    }

    /// A rate limit's `replaces` entries: none empty, none its own name.
    fn check_replaces<'y>(
        &self,
        rl: &'y YamlRateLimit,
        given_name: &str,
        at: &mut Vec<Step<'y>>,
    ) -> Result<(), RulesError> {
        at.push(Step::Field("replaces"));
        for (i, r) in rl.replaces.iter().enumerate() {
            at.push(Step::Index(i));
            if r.name.is_empty() {
                return Err(self.invalid(at, "should not have an empty replaces entry"));
            }
            if r.name == given_name {
                return Err(self.invalid(at, "replaces should not contain name of same descriptor"));
            }
            at.pop();
        }
        at.pop();
        Ok(())
    }

    /// The rule of the node at `path`: its unit, its Sluice limit (none
    /// for `unlimited`; a concurrency limit for `max_in_flight`), what it
    /// replaces, shadow and quota mode, and its metadata.
    fn rule<'y>(
        &self,
        d: &'y YamlDescriptor,
        rl: &'y YamlRateLimit,
        path: &str,
        at: &mut Vec<Step<'y>>,
    ) -> Result<Rule, RulesError> {
        let slots = self.slots(rl, at)?;
        let unit = match slots {
            Some(_) => None,
            None => Some(self.unit(rl, at)?),
        };
        let given_name = rl.name.clone().unwrap_or_default();
        self.check_replaces(rl, &given_name, at)?;
        let metadata =
            match &d.metadata {
                None => None,
                Some(m) => {
                    let mut m_at = at[..at.len() - 1].to_vec();
                    m_at.push(Step::Field("metadata"));
                    Some(to_struct(m).map_err(|e| {
                        self.invalid(&m_at, &format!("error parsing metadata: {e}"))
                    })?)
                }
            };
        let name: Arc<str> = sanitize(rl.name.as_deref().unwrap_or(path)).into();
        // Kept for the life of the process, with the limit's spec (see
        // `sluice_policy::labels`): the operator defines them.
        let plain = LimitLabels::plain(name, "envoy");
        let requests_per_unit = slots.map_or(rl.requests_per_unit.unwrap_or(0), |s| s.max);
        let kind = if rl.unlimited {
            RuleKind::Unlimited
        } else if requests_per_unit == 0 {
            RuleKind::Zero
        } else {
            let id = format!("envoy:{}/{path}", self.domain);
            let labels = |spec: &LimitSpec| plain.clone().kept(Some(spec));
            let (counted, field) = match (slots, unit) {
                (Some(s), _) => (
                    slots::slots_limited(&id, s, labels, self.store),
                    "max_in_flight",
                ),
                (None, u) => {
                    let unit = u.unwrap_or(Unit::Second);
                    let rate = limited(
                        &id,
                        requests_per_unit,
                        unit,
                        self.algorithm,
                        labels,
                        self.store,
                    );
                    (rate, "requests_per_unit")
                }
            };
            at.push(Step::Field(field));
            RuleKind::Counted(Box::new(counted.map_err(|e| self.invalid(at, &e))?))
        };
        let labels = match &kind {
            RuleKind::Counted(counted) => counted.limit.labels.clone(),
            _ => plain.kept(None),
        };
        Ok(Rule {
            labels,
            path: path.into(),
            detailed: d.detailed_metric,
            given_name,
            unit,
            requests_per_unit,
            replaces: rl.replaces.iter().map(|r| r.name.clone()).collect(),
            shadow: d.shadow_mode || self.shadow_mode,
            quota: d.quota_mode,
            kind,
            metadata,
            stats: Some(std::sync::OnceLock::new()),
        })
    }
}

/// A Sluice limit of `rpu` per `unit` under counter id `id` (with the
/// algorithm and rate appended), its counter registered in `store`, with
/// the labels `labels` gives for its spec.
pub(crate) fn limited(
    id: &str,
    rpu: u32,
    unit: Unit,
    algorithm: AlgorithmKind,
    labels: impl FnOnce(&LimitSpec) -> Labels,
    store: &dyn Store,
) -> Result<Limited, String> {
    let rpu = u64::from(rpu);
    let rate = Rate::new(rpu, unit.seconds() * 1_000_000_000)
        .ok_or_else(|| "requests_per_unit must be at least 1".to_owned())?;
    let spec = LimitSpec {
        algorithm,
        rate,
        burst: rpu,
        nodelay: true,
    };
    let id = format!("{id}/{}/{rate}/{rpu}", algorithm.name());
    let limit = Limit::plain(&id, labels(&spec), spec).map_err(|e| e.to_string())?;
    Ok(Limited {
        counter: store.counter(limit.counted.clone()),
        limit,
    })
}

/// A field's path for an error: `descriptors[0].rate_limit.unit`.
fn field_path(at: &[Step<'_>]) -> String {
    let mut out = String::new();
    for step in at {
        match step {
            Step::Field(f) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(f);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
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
    //! What the reference server refuses (its `loadDescriptors` and
    //! `loadConfig`, src/config/config_impl.go), Sluice refuses, at the
    //! place of the field.

    use super::*;
    use envoy_types::pb::google::protobuf::value::Kind;
    use sluice_store::{MemoryStore, MemoryStoreConfig};

    fn compile(text: &str) -> Result<Rules, String> {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let mut rules = Rules::default();
        compile_into(&mut rules, "t.yaml", text, &store, &Loading::default())
            .map(|()| rules)
            .map_err(|e| e.to_string())
    }

    fn refused(text: &str, starts: &str, says: &str) {
        let e = compile(text).expect_err("refused");
        assert!(e.starts_with(starts) && e.contains(says), "{e}");
    }

    #[test]
    fn a_domain_is_required() {
        refused("domain: \"\"\n", "t.yaml:1:1: `domain`: ", "empty domain");
        refused("descriptors: []\n", "t.yaml:", "domain");
    }

    #[test]
    fn an_empty_value_is_no_value() {
        // config_impl.go: `if descriptorConfig.Value != ""`.
        let rules = compile("domain: d\ndescriptors:\n  - key: a\n    value: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
        assert!(rules.find("d", [("a", "anything")]).is_some());
        refused(
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: \"\"\n",
            "t.yaml:4:5: ",
            "duplicate",
        );
    }

    #[test]
    fn a_key_is_required() {
        let text = "domain: d\ndescriptors:\n  - key: \"\"\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        refused(text, "t.yaml:3:5: `descriptors[0].key`: ", "empty key");
    }

    #[test]
    fn one_key_and_value_once_per_level() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: b\n  - key: a\n    value: v\n";
        refused(
            text,
            "t.yaml:6:5: `descriptors[2]`: ",
            "duplicate descriptor composite key `d.a_v`",
        );
        let text = "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n      - key: b\n";
        refused(
            text,
            "t.yaml:6:9: `descriptors[0].descriptors[1]`: ",
            "`d.a.b`",
        );
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    value: x*\n  - key: a\n    value: x*\n";
        refused(text, "t.yaml:5:5: ", "duplicate");
        // The same value under two keys, or at two levels, is no duplicate.
        compile("domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: b\n    value: v\n    descriptors:\n      - key: b\n        value: v\n").unwrap();
    }

    #[test]
    fn unlimited_takes_no_unit_and_a_limit_needs_one() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n";
        refused(
            text,
            "t.yaml:6:7: `descriptors[0].rate_limit.unit`: ",
            "should not specify rate limit unit when unlimited",
        );
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n";
        refused(
            text,
            "t.yaml:4:5: `descriptors[0].rate_limit.unit`: ",
            "invalid rate limit unit ``",
        );
        compile("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true}\n")
            .unwrap();
        compile("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: HOUR, requests_per_unit: 5}\n").unwrap();
    }

    #[test]
    fn replaces_names_another_limit() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      name: a\n      replaces:\n        - name: \"\"\n";
        refused(
            text,
            "t.yaml:9:11: `descriptors[0].rate_limit.replaces[0]`: ",
            "empty replaces entry",
        );
        let text = text.replace("name: \"\"", "name: a");
        refused(
            &text,
            "t.yaml:9:11: ",
            "replaces should not contain name of same descriptor",
        );
        compile(&text.replace("- name: a", "- name: b")).unwrap();
    }

    #[test]
    fn share_threshold_needs_a_wildcard() {
        let text =
            "domain: d\ndescriptors:\n  - key: a\n    value: files\n    share_threshold: true\n";
        refused(
            text,
            "t.yaml:5:5: `descriptors[0].share_threshold`: ",
            "wildcard",
        );
        compile(&text.replace("files", "files*")).unwrap();
        compile(&text.replace("files", "f*s")).unwrap();
    }

    #[test]
    fn unknown_fields_are_refused_but_not_inside_metadata() {
        refused(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limt: {}\n",
            "t.yaml:4:",
            "unknown field",
        );
        let rules = compile("domain: d\ndescriptors:\n  - key: a\n    metadata:\n      anything: [1, {nested: yes}]\n      other: text\n    rate_limit: {unit: second, requests_per_unit: 1}\n").unwrap();
        let rule = rules.find("d", [("a", "x")]).unwrap().rule;
        let m = rule.metadata.as_ref().expect("metadata");
        assert_eq!(m.fields.len(), 2);
        assert!(matches!(
            m.fields["other"].kind,
            Some(Kind::StringValue(ref s)) if s == "text"
        ));
    }

    #[test]
    fn a_limit_of_zero_refuses_everything() {
        let rules = compile("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0}\n").unwrap();
        let rule = rules.find("d", [("a", "x")]).unwrap().rule;
        assert!(matches!(rule.kind, RuleKind::Zero));
    }

    #[test]
    fn two_files_may_not_define_one_domain() {
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let mut rules = Rules::default();
        let a = "domain: d\ndescriptors:\n  - key: a\n";
        compile_into(&mut rules, "a.yaml", a, &store, &Loading::default()).unwrap();
        compile_into(
            &mut rules,
            "c.yaml",
            "domain: other\n",
            &store,
            &Loading::default(),
        )
        .unwrap();
        let e = compile_into(&mut rules, "b.yaml", a, &store, &Loading::default())
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("b.yaml:1:1: `domain`: duplicate domain `d`"),
            "{e}"
        );
        assert_eq!(rules.domains(), ["d", "other"]);
    }

    #[test]
    fn global_shadow_mode_puts_every_rule_in_shadow_mode() {
        // The reference server's SHADOW_MODE.
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let text = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        for shadow_mode in [false, true] {
            let loading = Loading {
                shadow_mode,
                ..Loading::default()
            };
            let mut rules = Rules::default();
            compile_into(&mut rules, "a.yaml", text, &store, &loading).unwrap();
            let found = rules.find("d", [("a", "x")]).unwrap();
            assert_eq!(found.rule.shadow, shadow_mode);
        }
    }

    #[test]
    fn merged_domains_take_every_file_s_rules_but_no_duplicate() {
        // The reference server's MERGE_DOMAIN_CONFIG patches a domain's
        // descriptors with each file's (loadConfig).
        let store = MemoryStore::new(MemoryStoreConfig::default());
        let merge = Loading {
            merge_domains: true,
            ..Loading::default()
        };
        let mut rules = Rules::default();
        let a = "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n";
        let b = "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
        compile_into(&mut rules, "a.yaml", a, &store, &merge).unwrap();
        compile_into(&mut rules, "b.yaml", b, &store, &merge).unwrap();
        assert!(rules.find("d", [("a", "x")]).is_some() && rules.find("d", [("b", "x")]).is_some());
        let e = compile_into(&mut rules, "c.yaml", a, &store, &merge)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("c.yaml:3:5: `descriptors[0]`: duplicate"),
            "{e}"
        );
    }

    #[test]
    fn matching_order_exact_then_first_wildcard_then_key_only() {
        // README: "Wildcard Matching"; GetLimit tries key_value, then the
        // level's wildcards in file order, then the key alone.
        let text = r#"
domain: d
descriptors:
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1, name: any}
  - key: path
    value: /api*v1
    rate_limit: {unit: second, requests_per_unit: 1, name: first}
  - key: path
    value: "/api/*"
    rate_limit: {unit: second, requests_per_unit: 1, name: second}
  - key: path
    value: /api/users/v1
    rate_limit: {unit: second, requests_per_unit: 1, name: exact}
  - key: path
    value: foo*bar*baz
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 1, name: shared}
"#;
        let rules = compile(text).unwrap();
        let name = |v: &str| {
            rules
                .find("d", [("path", v)])
                .map(|f| f.rule.given_name.clone())
        };
        assert_eq!(name("/api/users/v1").as_deref(), Some("exact"));
        assert_eq!(name("/api/orders/v1").as_deref(), Some("first"));
        assert_eq!(name("/api/orders/v2").as_deref(), Some("second"));
        assert_eq!(name("/other").as_deref(), Some("any"));
        let f = rules.find("d", [("path", "foo-bar-baz")]).unwrap();
        assert_eq!(f.rule.given_name, "shared");
        assert_eq!(f.shared.as_slice(), &[(0, "foo*bar*baz")]);
        assert!(
            rules
                .find("d", [("path", "/api/users/v1")])
                .unwrap()
                .shared
                .is_empty()
        );
    }
}
