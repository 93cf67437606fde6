//! Compiling a config into a [`Policy`]: its limits, plans, cost rules and
//! key assignments, each error located at its file, line, column and
//! field.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use crate::KeySource;
use crate::client_ip::TrustedProxies;
use crate::compile_keys::{assignments, refuse_keys_loss, runtime_keys};
use crate::compile_limit::{compile_cost_rule, compile_limit};
use crate::config::{BucketConfig, Config, ConfigError, PlanConfig, Source};
use crate::policy::{CostRule, LimitDef, Policy};

impl Policy {
    /// Reads, parses and checks a config file, its deployment settings
    /// included (a config with a bad one is refused whoever loads it).
    pub fn load(path: &std::path::Path) -> Result<Self, ConfigError> {
        let source = Source::read(path)?;
        Self::checked(&source)
    }

    /// The policy of a whole config, its deployment settings checked
    /// (compiled, and dropped: they are the binary's, read at start only).
    fn checked(source: &Source) -> Result<Self, ConfigError> {
        let config = source.parse()?;
        Self::checked_config(source, &config)
    }

    /// The policy of a parsed (or built) config, its deployment settings
    /// checked: the one path [`Policy::load`], [`Policy::from_toml`] and
    /// [`Policy::from_config`] share.
    fn checked_config(source: &Source, config: &Config) -> Result<Self, ConfigError> {
        crate::deployment::Deployment::compile(source, config)?;
        Self::compile(source, config)
    }

    /// Checks a parsed config's policy and compiles it. (Its deployment
    /// settings are [`Deployment::compile`](crate::Deployment::compile)'s:
    /// callers that need both compile both; [`Policy::load`] and
    /// [`Policy::from_toml`] check them too.)
    pub fn compile(source: &Source, config: &Config) -> Result<Self, ConfigError> {
        Self::compile_after(source, config, None)
    }

    /// [`compile`](Self::compile) for a reload: also refuses a keys file
    /// that lost more than half of the `running` policy's assignments in
    /// one change, unless `client.allow_keys_file_loss`.
    pub fn compile_replacing(
        source: &Source,
        config: &Config,
        running: &Policy,
    ) -> Result<Self, ConfigError> {
        Self::compile_after(source, config, Some(running))
    }

    fn compile_after(
        source: &Source,
        config: &Config,
        running: Option<&Policy>,
    ) -> Result<Self, ConfigError> {
        let mut limits = Limits::default();
        let global = limits.add_global(source, config)?;
        let client_key = config.client.key.clone();
        let mut plans = BTreeMap::new();
        let mut cost_rules = BTreeMap::new();
        for (plan, pc) in &config.plans {
            let (ids, rules) = limits.add_plan(source, config, plan, pc)?;
            plans.insert(plan.clone(), ids);
            cost_rules.insert(plan.clone(), rules);
        }
        if !plans.is_empty() && client_key.is_none() {
            return Err(source.error_at(
                None,
                "client.key: plans need `[client] key = \"header:<Name>\"` to identify clients",
            ));
        }
        let has_plan = |p: &str| plans.contains_key(p);
        let default_plan = default_plan(source, config, &has_plan)?;
        let (assignments, keys_file) = assignments(source, config, &has_plan)?;
        refuse_keys_loss(source, config, &assignments, &keys_file, running)?;
        let keys_file = keys_file.map(|(path, _)| path);
        let runtime_keys = runtime_keys(source, config)?;
        let limits = limits.defs;
        refuse_no_limits(source, config, &limits)?;
        let mut trusted = TrustedProxies::new(config.client.trusted_proxies.clone())
            .with_ipv6_prefix(ipv6_prefix(source, &config.client)?);
        if let Some(header) = config.client.forwarded_header {
            trusted = trusted.with_header(header);
        }
        let events = crate::events::EventSettings::from_config(source, config)?;
        let overload =
            crate::OverloadSettings::from_config(source, config.overload.as_ref(), &has_plan)?;
        // The config is good: its limits' labels are kept for the life of
        // the process from now on (see `labels`).
        let limits: Vec<LimitDef> = limits
            .into_iter()
            .map(|mut def| {
                let spec = def.limit.spec;
                def.limit.labels = def.limit.labels.into_kept(Some(&spec));
                def
            })
            .collect();
        let alike = applies_alike(config, client_key.as_ref(), &limits, &global);
        let reads_host = limits.iter().any(|l| l.matcher.reads_host())
            || cost_rules
                .values()
                .flatten()
                .any(|r| r.matcher.reads_host());
        Ok(Self {
            alike,
            reads_host,
            limits,
            global,
            plans,
            cost_rules,
            assignments,
            keys_file,
            runtime_keys,
            carry_over: config.client.carry_over,
            default_plan,
            client_key,
            trusted,
            headers: config.headers,
            access: config.access.clone(),
            events,
            overload: std::sync::Arc::new(overload),
        })
    }

    /// Parses and checks a config given as TOML text; `name` stands for the
    /// file in error messages.
    ///
    /// ```
    /// let policy = sluice_policy::Policy::from_toml(
    ///     "inline.toml",
    ///     r#"
    ///         [[limits]]
    ///         name = "per-ip"
    ///         key = "ip"
    ///         rate = "10/s"
    ///         burst = 20
    ///     "#,
    /// )
    /// .unwrap();
    /// assert_eq!(policy.limits().len(), 1);
    /// ```
    pub fn from_toml(name: &str, text: &str) -> Result<Self, ConfigError> {
        Self::checked(&Source {
            file: name.into(),
            text: text.to_owned(),
        })
    }

    /// Checks a config built in code (not parsed from text) and compiles
    /// it, with the same checks as [`Policy::from_toml`], deployment
    /// settings included. `name` stands for the file in error messages,
    /// which have no line or column: there is no text to point into. Files
    /// the config names (`client.keys_file`) are resolved against `name`'s
    /// folder.
    ///
    /// ```
    /// use sluice_policy::config::{Config, LimitConfig, Spanned};
    /// use sluice_policy::{KeySource, Policy};
    ///
    /// let limit = LimitConfig {
    ///     name: Some("per-ip".into()),
    ///     key: Some(KeySource::Ip),
    ///     rate: Some(Spanned::new(0..0, "10/s".parse().unwrap())),
    ///     ..LimitConfig::default()
    /// };
    /// let config = Config {
    ///     limits: vec![Spanned::new(0..0, limit)],
    ///     ..Config::default()
    /// };
    /// let policy = Policy::from_config("<code>", &config).unwrap();
    /// assert_eq!(policy.limits().len(), 1);
    ///
    /// // An error names the field, at no line.
    /// let e = Policy::from_config("<code>", &Config::default()).unwrap_err();
    /// assert_eq!(e.line, 0);
    /// assert!(e.message.starts_with("no_limits:"), "{e}");
    /// ```
    pub fn from_config(name: &str, config: &Config) -> Result<Self, ConfigError> {
        let source = Source {
            file: name.into(),
            text: String::new(),
        };
        Self::checked_config(&source, config).map_err(|e| {
            // Spans of a built config point into no text: drop them. (An
            // error in a file it names keeps its location.)
            if e.file == source.file {
                ConfigError {
                    line: 0,
                    column: 0,
                    ..e
                }
            } else {
                e
            }
        })
    }
}

/// `client.ipv6_prefix`: 1 to 128.
fn ipv6_prefix(source: &Source, client: &crate::config::ClientConfig) -> Result<u8, ConfigError> {
    match &client.ipv6_prefix {
        None => Ok(crate::client_ip::DEFAULT_IPV6_PREFIX),
        Some(p) if (1..=128).contains(p.get_ref()) => Ok(*p.get_ref()),
        Some(p) => Err(source.error_at(
            Some(p.span()),
            format!(
                "client.ipv6_prefix: {} is not a prefix length from 1 to 128",
                p.get_ref()
            ),
        )),
    }
}

/// A config that limits nothing, which is most often an empty or
/// half-written file, is refused unless it says `no_limits = true`. (With
/// `[envoy]`, the limits come from its YAML.)
fn refuse_no_limits(
    source: &Source,
    config: &Config,
    limits: &[LimitDef],
) -> Result<(), ConfigError> {
    if limits.is_empty() && config.envoy.is_none() && !config.no_limits {
        return Err(source.error_at(
            Some(0..0),
            "no_limits: this config defines no limits, so Sluice would limit nothing; \
             if that is intended, put `no_limits = true` at the top of the file",
        ));
    }
    Ok(())
}

/// The limits compiled so far, and the names of the config's own (which
/// no plan's limit may reuse).
#[derive(Default)]
struct Limits {
    defs: Vec<LimitDef>,
    global_names: HashSet<String>,
}

impl Limits {
    /// The config's own `[[limits]]`: their indices.
    fn add_global(&mut self, source: &Source, config: &Config) -> Result<Vec<usize>, ConfigError> {
        let mut global = Vec::new();
        for (i, l) in config.limits.iter().enumerate() {
            let name = l
                .get_ref()
                .name
                .clone()
                .unwrap_or_else(|| format!("limit-{}", i + 1));
            if let Some(b) = l
                .get_ref()
                .bucket
                .as_ref()
                .filter(|b| *b.get_ref() == BucketConfig::Shared)
            {
                return Err(source.error_at(
                    Some(b.span()),
                    format!(
                        "limit `{name}`: bucket = \"shared\" draws from a plan's bucket, so it belongs in a plan's limits"
                    ),
                ));
            }
            let def = compile_limit(source, l, name, None, None, None, &config.plans)?;
            if !self.global_names.insert(def.limit.name.to_string()) {
                return Err(source.error_at(
                    Some(l.span()),
                    format!("limits: duplicate limit name `{}`", def.limit.name),
                ));
            }
            global.push(self.defs.len());
            self.defs.push(def);
        }
        Ok(global)
    }

    /// One plan's limits and its `bucket = "shared"` cost rules: the
    /// limits' indices, and the rules.
    fn add_plan(
        &mut self,
        source: &Source,
        config: &Config,
        plan: &String,
        pc: &PlanConfig,
    ) -> Result<(Vec<usize>, Vec<CostRule>), ConfigError> {
        let mut ids = Vec::new();
        let mut rules = Vec::new();
        let mut plan_names = HashSet::new();
        for (i, l) in pc.limits.iter().enumerate() {
            let name = l.get_ref().name.clone().unwrap_or_else(|| {
                if pc.limits.len() == 1 {
                    plan.clone()
                } else {
                    format!("{plan}-{}", i + 1)
                }
            });
            if self.global_names.contains(&name) || !plan_names.insert(name.clone()) {
                return Err(source.error_at(
                    Some(l.span()),
                    format!("plans.{plan}: duplicate limit name `{name}`"),
                ));
            }
            if l.get_ref().bucket.as_ref().map(|b| *b.get_ref()) == Some(BucketConfig::Shared) {
                rules.push((compile_cost_rule(source, l, name)?, l.span()));
                continue;
            }
            let client_key = config.client.key.as_ref();
            let def = compile_limit(
                source,
                l,
                name,
                Some(plan),
                client_key,
                Some(pc),
                &config.plans,
            )?;
            ids.push(self.defs.len());
            self.defs.push(def);
        }
        let main: Vec<&LimitDef> = ids
            .iter()
            .map(|&i| &self.defs[i])
            .filter(|l| l.matcher.is_any())
            .collect();
        for (rule, span) in &rules {
            check_cost_rule(source, plan, rule, span, &main)?;
        }
        Ok((ids, rules.into_iter().map(|(r, _)| r).collect()))
    }
}

/// A plan's `bucket = "shared"` rule charges the plan's main limits (those
/// without a `match`): there must be some, and its cost must fit each.
fn check_cost_rule(
    source: &Source,
    plan: &str,
    rule: &CostRule,
    span: &std::ops::Range<usize>,
    main: &[&LimitDef],
) -> Result<(), ConfigError> {
    if main.is_empty() {
        return Err(source.error_at(
            Some(span.clone()),
            format!(
                "plans.{plan}: rule `{}` has bucket = \"shared\", which charges the plan's main limits (those without a `match`), and this plan has none",
                rule.name
            ),
        ));
    }
    if let Some(l) = main.iter().find(|l| rule.cost > l.limit.spec.burst) {
        return Err(source.error_at(
            Some(span.clone()),
            format!(
                "plans.{plan}: rule `{}`: cost {} exceeds the burst {} of limit `{}`: no matching request could ever pass",
                rule.name, rule.cost, l.limit.spec.burst, l.limit.name
            ),
        ));
    }
    Ok(())
}

/// `[client] default_plan`, which must name a plan.
fn default_plan(
    source: &Source,
    config: &Config,
    has_plan: &dyn Fn(&str) -> bool,
) -> Result<Option<String>, ConfigError> {
    match &config.client.default_plan {
        None => Ok(None),
        Some(p) if has_plan(p.get_ref()) => Ok(Some(p.get_ref().clone())),
        Some(p) => Err(source.error_at(
            Some(p.span()),
            format!("client.default_plan: no plan named `{}`", p.get_ref()),
        )),
    }
}

/// The folder files named in a config are resolved against.
pub(crate) fn config_dir(source: &Source) -> &Path {
    source.file.parent().unwrap_or(Path::new(""))
}

/// Whether every request meets the same limits: no client key (so no
/// plans), no allow or deny list, and no limit with a `match`. Such a
/// policy resolves a request to its keys alone.
fn applies_alike(
    config: &Config,
    client_key: Option<&KeySource>,
    limits: &[LimitDef],
    global: &[usize],
) -> bool {
    let a = &config.access;
    client_key.is_none()
        && a.allow_keys.is_empty()
        && a.allow_cidrs.is_empty()
        && a.deny_keys.is_empty()
        && a.deny_cidrs.is_empty()
        && global.iter().all(|&i| limits[i].matcher.is_any())
}
