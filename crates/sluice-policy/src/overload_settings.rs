//! `[overload]`, resolved: whether adaptive overload protection is on, the
//! plans as priority classes, the gate's parameters, and which plans wait
//! when shed. Part of the [`Policy`](crate::Policy), so a reload may change
//! it; adapters keep their gate (and what it learned) while
//! [`gate`](OverloadSettings::gate) is unchanged.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_core::adaptive::{GateConfig, MAX_CLASSES};
use toml::Spanned;

use crate::config::{ConfigError, OnOverloadConfig, OverloadConfig, Source};

/// The longest a shed request may wait for room.
pub const MAX_WAIT: Duration = Duration::from_secs(1);

/// The wait of a plan with `on_overload = "wait"` and no `max_wait`.
pub const DEFAULT_WAIT: Duration = Duration::from_millis(200);

/// The most requests that may wait at once, by default.
pub const DEFAULT_MAX_WAITING: usize = 64;

/// The highest `max_waiting` accepted.
pub const MAX_WAITING: usize = 10_000;

/// The label of the one class of a gate without `classes`.
pub const SINGLE_CLASS: &str = "all";

/// `[overload]`, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct OverloadSettings {
    /// Whether the protection is on.
    pub enabled: bool,
    /// The classes' names, the lowest first; one name ([`SINGLE_CLASS`])
    /// when the config lists none.
    pub classes: Vec<String>,
    /// The gate's parameters (its `classes` is `classes.len()`).
    pub gate: GateConfig,
    /// The plans that wait when shed, with their longest wait.
    pub waits: BTreeMap<String, Duration>,
    /// The most requests waiting at once.
    pub max_waiting: usize,
}

impl Default for OverloadSettings {
    /// Off.
    fn default() -> Self {
        Self {
            enabled: false,
            classes: vec![SINGLE_CLASS.to_owned()],
            gate: GateConfig::default(),
            waits: BTreeMap::new(),
            max_waiting: DEFAULT_MAX_WAITING,
        }
    }
}

impl OverloadSettings {
    /// The class of a request of `plan` (of none: `None`): its index in
    /// `classes`, or 0, the lowest, for a plan not listed.
    pub fn class_of(&self, plan: Option<&str>) -> usize {
        plan.and_then(|p| self.classes.iter().position(|c| c == p))
            .unwrap_or(0)
    }

    /// Whether requests need their plan found: more than one class, or a
    /// plan that waits.
    pub fn needs_plan(&self) -> bool {
        self.classes.len() > 1 || !self.waits.is_empty()
    }

    /// How long a shed request of `plan` may wait for room; `None`: it is
    /// refused at once.
    pub fn max_wait(&self, plan: Option<&str>) -> Option<Duration> {
        plan.and_then(|p| self.waits.get(p)).copied()
    }

    /// Resolves `[overload]` (absent: off), pointing errors at the
    /// offending field. `has_plan` says which plans exist.
    pub fn from_config(
        source: &Source,
        config: Option<&Spanned<OverloadConfig>>,
        has_plan: &dyn Fn(&str) -> bool,
    ) -> Result<Self, ConfigError> {
        let Some(spanned) = config else {
            return Ok(Self::default());
        };
        let table = spanned.get_ref();
        let at = |span: std::ops::Range<usize>, m: String| {
            source.error_at(Some(span), format!("overload.{m}"))
        };
        let classes = classes(table, has_plan, &at)?;
        let mut gate = GateConfig {
            classes: classes.len(),
            ..GateConfig::default()
        };
        let limits = [
            (&table.initial_limit, &mut gate.limit.initial_limit),
            (&table.min_limit, &mut gate.limit.min_limit),
            (&table.max_limit, &mut gate.limit.max_limit),
        ];
        for (field, slot) in limits {
            if let Some(v) = field {
                *slot = *v.get_ref();
            }
        }
        if let Some(s) = &table.lowest_share {
            gate.lowest_share = *s.get_ref();
        }
        if let Err(e) = gate.validate() {
            let span = first_span(table).unwrap_or_else(|| spanned.span());
            return Err(at(span, e.to_string()));
        }
        let max_waiting = match &table.max_waiting {
            None => DEFAULT_MAX_WAITING,
            Some(n) if (1..=MAX_WAITING).contains(n.get_ref()) => *n.get_ref(),
            Some(n) => {
                return Err(at(
                    n.span(),
                    format!("max_waiting must be in 1..={MAX_WAITING}"),
                ));
            }
        };
        Ok(Self {
            enabled: table.enabled.as_ref().is_none_or(|e| *e.get_ref()),
            classes,
            gate,
            waits: waits(source, table, has_plan, &at)?,
            max_waiting,
        })
    }
}

type At<'a> = dyn Fn(std::ops::Range<usize>, String) -> ConfigError + 'a;

/// `classes`: existing plans, each once, at most [`MAX_CLASSES`].
fn classes(
    table: &OverloadConfig,
    has_plan: &dyn Fn(&str) -> bool,
    at: &At<'_>,
) -> Result<Vec<String>, ConfigError> {
    if table.classes.is_empty() {
        return Ok(vec![SINGLE_CLASS.to_owned()]);
    }
    let mut names: Vec<String> = Vec::with_capacity(table.classes.len());
    for c in &table.classes {
        let name = c.get_ref();
        if !has_plan(name) {
            return Err(at(c.span(), format!("classes: no plan named `{name}`")));
        }
        if names.contains(name) {
            return Err(at(c.span(), format!("classes: `{name}` is listed twice")));
        }
        names.push(name.clone());
    }
    if names.len() > MAX_CLASSES {
        let span = table.classes[MAX_CLASSES].span();
        return Err(at(span, format!("classes: at most {MAX_CLASSES}")));
    }
    Ok(names)
}

/// The span of the first limit field given, for errors about them
/// together.
fn first_span(table: &OverloadConfig) -> Option<std::ops::Range<usize>> {
    [&table.initial_limit, &table.min_limit, &table.max_limit]
        .into_iter()
        .flatten()
        .map(Spanned::span)
        .min_by_key(|s| s.start)
        .or_else(|| table.lowest_share.as_ref().map(Spanned::span))
}

/// `[overload.plans.<plan>]`: the plans that wait, and for how long.
fn waits(
    source: &Source,
    table: &OverloadConfig,
    has_plan: &dyn Fn(&str) -> bool,
    at: &At<'_>,
) -> Result<BTreeMap<String, Duration>, ConfigError> {
    let mut waits = BTreeMap::new();
    for (plan, pc) in &table.plans {
        if !has_plan(plan) {
            return Err(at(
                pc.span(),
                format!("plans.{plan}: no plan named `{plan}`"),
            ));
        }
        let p = pc.get_ref();
        let max_wait = match &p.max_wait {
            None => DEFAULT_WAIT,
            Some(text) => wait(text, &|m| {
                at(text.span(), format!("plans.{plan}.max_wait: {m}"))
            })?,
        };
        match p.on_overload {
            OnOverloadConfig::Reject if p.max_wait.is_some() => {
                let span = p.max_wait.as_ref().map_or(pc.span(), Spanned::span);
                return Err(source.error_at(
                    Some(span),
                    format!("overload.plans.{plan}.max_wait: only with on_overload = \"wait\""),
                ));
            }
            OnOverloadConfig::Reject => {}
            OnOverloadConfig::Wait => {
                waits.insert(plan.clone(), max_wait);
            }
        }
    }
    Ok(waits)
}

/// A `max_wait`: a duration above 0 and at most [`MAX_WAIT`].
fn wait(
    text: &Spanned<String>,
    err: &dyn Fn(String) -> ConfigError,
) -> Result<Duration, ConfigError> {
    let d = sluice_core::parse_duration(text.get_ref())
        .map(Duration::from_nanos)
        .map_err(|e| err(format!("`{}`: {e}", text.get_ref())))?;
    if d.is_zero() || d > MAX_WAIT {
        return Err(err(format!(
            "`{}` must be above 0 and at most 1s: a wait must be short",
            text.get_ref()
        )));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLANS: &str = r#"
[client]
key = "header:X-Api-Key"
[plans.free]
limits = [{ rate = "10/s" }]
[plans.pro]
limits = [{ rate = "10/s" }]
[plans.enterprise]
limits = [{ rate = "10/s" }]
"#;

    fn settings(overload: &str) -> Result<OverloadSettings, ConfigError> {
        let text = format!("{overload}\n{PLANS}");
        crate::Policy::from_toml("t.toml", &text).map(|p| p.overload().as_ref().clone())
    }

    #[test]
    fn absent_is_off_and_present_is_on() {
        let s = settings("").unwrap();
        assert!(!s.enabled);
        let s = settings("[overload]").unwrap();
        assert!(s.enabled);
        assert_eq!(s.classes, [SINGLE_CLASS]);
        assert_eq!(s.class_of(Some("pro")), 0);
        assert!(!settings("[overload]\nenabled = false").unwrap().enabled);
    }

    #[test]
    fn classes_are_plans_lowest_first() {
        let s = settings(
            "[overload]\nclasses = [\"free\", \"pro\", \"enterprise\"]\nmax_limit = 300\n\
             [overload.plans.enterprise]\non_overload = \"wait\"\nmax_wait = \"250ms\"",
        )
        .unwrap();
        assert_eq!(s.gate.classes, 3);
        assert_eq!(s.gate.limit.max_limit, 300);
        assert_eq!(s.class_of(Some("enterprise")), 2);
        assert_eq!(s.class_of(Some("nope")), 0);
        assert_eq!(s.class_of(None), 0);
        assert_eq!(
            s.max_wait(Some("enterprise")),
            Some(Duration::from_millis(250))
        );
        assert_eq!(s.max_wait(Some("pro")), None);
    }

    #[test]
    fn errors_point_at_the_field() {
        let e = settings("[overload]\nclasses = [\"free\", \"gold\"]").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:2:20: overload.classes: no plan named `gold`"),
            "{e}"
        );
        let e = settings("[overload]\nmin_limit = 50\nmax_limit = 10").unwrap_err();
        assert!(e.to_string().starts_with("t.toml:2:13: overload."), "{e}");
        let e = settings("[overload]\nlowest_share = 1.5").unwrap_err();
        assert!(e.to_string().contains("lowest_share"), "{e}");
        let e = settings("[overload.plans.pro]\non_overload = \"wait\"\nmax_wait = \"5s\"")
            .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("t.toml:3:12: overload.plans.pro.max_wait"),
            "{e}"
        );
        let e = settings("[overload]\nmax_waiting = 0").unwrap_err();
        assert!(e.to_string().contains("max_waiting"), "{e}");
        let e = settings("[overload]\nbogus = 1").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
