//! Compiling one `[[limits]]` entry (of the config or of a plan) into a
//! [`LimitDef`]: its rate and burst, key, match, cost, delay and class
//! shares, each error located at its field.

use std::collections::BTreeMap;
use std::sync::Arc;

use sluice_core::LimitSpec;
use sluice_store::seam::CounterDef;
use toml::Spanned;

use crate::config::{ConfigError, LimitConfig, OnLimitConfig, PlanConfig, Source};
use crate::key_source::KeySource;
use crate::labels::LimitLabels;
use crate::limit::{DelayDef, Limit};
use crate::matcher::Matcher;
use crate::policy::{CostRule, LimitDef};

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':' | b'/'))
}

/// One `[[limits]]` entry, of the config (`plan` `None`) or of a plan,
/// compiled.
pub(crate) fn compile_limit(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: String,
    plan: Option<&String>,
    client_key: Option<&KeySource>,
    plan_config: Option<&PlanConfig>,
    all_plans: &BTreeMap<String, PlanConfig>,
) -> Result<LimitDef, ConfigError> {
    let c = l.get_ref();
    let at = |msg: String| source.error_at(Some(l.span()), msg);
    if !valid_name(&name) {
        return Err(at(format!(
            "limit name `{name}`: use 1 to 64 letters, digits, `-`, `_`, `.`, `:` or `/`"
        )));
    }
    let (spec, cost) = spec_and_cost(source, l, &name)?;
    let enforce_percent = match &c.enforce_percent {
        None => 100,
        Some(p) if *p.get_ref() <= 100 => *p.get_ref(),
        Some(p) => {
            return Err(source.error_at(
                Some(p.span()),
                format!("limit `{name}`: enforce_percent must be between 0 and 100"),
            ));
        }
    };
    let key = match (&c.key, client_key) {
        (Some(k), _) => k.clone(),
        (None, Some(k)) if plan.is_some() => k.clone(),
        (None, _) => {
            return Err(at(format!(
                "limit `{name}`: missing field `key` (\"ip\", \"global\" or \"header:<Name>\")"
            )));
        }
    };
    let matcher = Matcher::compile(c.matches.get_ref())
        .map_err(|m| source.error_at(Some(c.matches.span()), format!("limit `{name}`: {m}")))?;
    let delay = compile_delay(source, l, &name, &spec, plan_config)?;
    let max_share = max_share(source, c, &name, all_plans)?;
    let settle = crate::compile_settle::settle_of(source, l, &name, &spec, plan_config)?;
    let forgive = settle.as_ref().is_some_and(|s| s.forgive);
    let counted = counter_of(
        source,
        l,
        &name,
        counter_id(plan, &name, &spec, delay.as_ref()),
        (delay.as_ref().map_or(spec, |d| d.spec), forgive),
    )?;
    let id = counted.id().to_owned();
    let name: Arc<str> = name.into();
    // Counted until the whole config has compiled (`Policy::compile`
    // keeps them then), so that a config refused keeps nothing.
    let labels = crate::labels::Labels::counted(LimitLabels {
        limit: name.clone(),
        plan: plan.map_or("", String::as_str).into(),
        endpoint: matcher.describe().into(),
        unit: settle.as_ref().and_then(|s| s.from.quota_unit()),
        header_items: crate::labels::HeaderItems::default(),
    });
    Ok(LimitDef {
        limit: Limit {
            name,
            labels,
            spec,
            counted,
            delay,
            max_share,
            plan: plan.cloned(),
            settle,
        },
        id,
        key,
        matcher,
        cost,
        shadow: c.shadow,
        enforce_percent,
    })
}

/// A limit's algorithm, rate and burst, and the cost of one matching
/// request (which must fit the burst).
fn spec_and_cost(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
) -> Result<(LimitSpec, u64), ConfigError> {
    let c = l.get_ref();
    if c.algorithm == sluice_core::AlgorithmKind::Concurrency {
        return crate::compile_slots::slots_and_cost(source, l, name);
    }
    if let Some(m) = &c.max_in_flight {
        return Err(source.error_at(
            Some(m.span()),
            format!("limit `{name}`: max_in_flight is for `algorithm = \"concurrency\"`"),
        ));
    }
    let Some(rate_field) = &c.rate else {
        return Err(source.error_at(
            Some(l.span()),
            format!("limit `{name}`: missing field `rate` (e.g. \"10/s\")"),
        ));
    };
    let rate = *rate_field.get_ref();
    let spec = LimitSpec {
        algorithm: c.algorithm,
        rate,
        burst: c.burst.as_ref().map_or(rate.amount(), |b| *b.get_ref()),
        nodelay: c.nodelay,
    };
    // A bad burst is reported at the burst, or at the rate it defaults from.
    let burst_span = c.burst.as_ref().map_or(rate_field.span(), Spanned::span);
    spec.build().map_err(|e| {
        source.error_at(
            Some(burst_span.clone()),
            format!("limit `{name}`: burst: {e}"),
        )
    })?;
    let cost = c.cost.as_ref().map_or(1, |c| *c.get_ref());
    if cost > spec.burst {
        let span = c.cost.as_ref().map_or(burst_span, Spanned::span);
        return Err(source.error_at(
            Some(span),
            format!(
                "limit `{name}`: cost {cost} exceeds burst {}: no matching request could ever pass",
                spec.burst
            ),
        ));
    }
    Ok((spec, cost))
}

/// `max_share`: per plan, the most of the burst (percent) its keys may use.
/// A share of 100 restricts nothing and is dropped.
fn max_share(
    source: &Source,
    c: &LimitConfig,
    name: &str,
    all_plans: &BTreeMap<String, PlanConfig>,
) -> Result<BTreeMap<String, u8>, ConfigError> {
    let mut max_share = BTreeMap::new();
    let Some(shares) = &c.max_share else {
        return Ok(max_share);
    };
    for (class, percent) in shares.get_ref() {
        if !all_plans.contains_key(class) {
            return Err(source.error_at(
                Some(shares.span()),
                format!("limit `{name}`: max_share: no plan named `{class}`"),
            ));
        }
        if !(1..=100).contains(percent) {
            return Err(source.error_at(
                Some(shares.span()),
                format!(
                    "limit `{name}`: max_share: {class} = {percent}: a share is a percentage from 1 to 100"
                ),
            ));
        }
        if *percent < 100 {
            max_share.insert(class.clone(), *percent);
        }
    }
    Ok(max_share)
}

/// A limit's counter, of id `id` and `spec`, its debt forgiven at a
/// window's end if `forgive`: refused where the algorithm has no window,
/// since it would change nothing.
fn counter_of(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
    mut id: String,
    (spec, forgive): (LimitSpec, bool),
) -> Result<CounterDef, ConfigError> {
    if forgive {
        // Debt forgiven at the window's end is another state: other counters.
        id.push_str("/forgive");
    }
    let counted = CounterDef::new(&id, spec)
        .map_err(|e| source.error_at(Some(l.span()), format!("limit `{name}`: {e}")))?
        .with_debt_forgiven(forgive);
    if forgive && !counted.debt_forgiven() {
        // Say so rather than let an operator believe debt is dropped.
        return Err(source.error_at(
            l.get_ref().settle.as_ref().map(Spanned::span),
            format!(
                "limit `{name}`: settle.debt = \"forgive\": only a window algorithm (fixed_window, sliding_window, sliding_log) has a window's end to forgive debt at; a {}'s debt is paid off at its rate",
                spec.algorithm.name()
            ),
        ));
    }
    Ok(counted)
}

/// The identity of a limit's counters: scope, name and definition, so
/// that a limit whose definition changes gets fresh counters.
fn counter_id(
    plan: Option<&String>,
    name: &str,
    spec: &LimitSpec,
    delay: Option<&DelayDef>,
) -> String {
    let scope = plan.map_or_else(|| "limit".to_owned(), |p| format!("plan:{p}"));
    let mut id = format!(
        "{scope}/{name}/{}/{}/{}/{}",
        spec.algorithm.name(),
        spec.rate,
        spec.burst,
        spec.nodelay
    );
    if let Some(d) = delay {
        id.push_str(&format!("/delay:{}", d.max_delay));
    }
    id
}

/// A limit's `on_limit = "delay"` with its `max_delay` and `max_queue`
/// (its own, or its plan's); `None` without it. `max_delay` or
/// `max_queue` without it is an error.
pub(crate) struct DelayFields<'a> {
    pub(crate) on_limit: &'a Spanned<OnLimitConfig>,
    pub(crate) max_delay: Option<&'a Spanned<String>>,
    /// `max_queue`, 100 by default.
    pub(crate) max_queue: usize,
}

impl<'a> DelayFields<'a> {
    pub(crate) fn of(
        source: &Source,
        c: &'a LimitConfig,
        name: &str,
        plan: Option<&'a PlanConfig>,
    ) -> Result<Option<Self>, ConfigError> {
        let at = |span: std::ops::Range<usize>, msg: String| {
            source.error_at(Some(span), format!("limit `{name}`: {msg}"))
        };
        let on_limit = c
            .on_limit
            .as_ref()
            .or(plan.and_then(|p| p.on_limit.as_ref()));
        let Some(on_limit) = on_limit.filter(|o| *o.get_ref() == OnLimitConfig::Delay) else {
            let own = c.max_delay.as_ref().map(Spanned::span);
            return match own.or(c.max_queue.as_ref().map(Spanned::span)) {
                Some(field) => Err(at(
                    field,
                    "max_delay and max_queue need on_limit = \"delay\"".into(),
                )),
                None => Ok(None),
            };
        };
        let max_queue = match c
            .max_queue
            .as_ref()
            .or(plan.and_then(|p| p.max_queue.as_ref()))
        {
            None => 100,
            Some(q) if *q.get_ref() >= 1 => usize::try_from(*q.get_ref()).unwrap_or(usize::MAX),
            Some(q) => return Err(at(q.span(), "max_queue must be at least 1".into())),
        };
        Ok(Some(Self {
            on_limit,
            max_delay: c
                .max_delay
                .as_ref()
                .or(plan.and_then(|p| p.max_delay.as_ref())),
            max_queue,
        }))
    }
}

/// A rate limit's `on_limit = "delay"` (a concurrency limit's is a wait
/// for a slot: `compile_slots::slot_wait`).
fn compile_delay(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
    spec: &LimitSpec,
    plan: Option<&PlanConfig>,
) -> Result<Option<DelayDef>, ConfigError> {
    let at = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    let Some(DelayFields {
        on_limit,
        max_delay,
        max_queue,
    }) = DelayFields::of(source, l.get_ref(), name, plan)?
    else {
        return Ok(None);
    };
    if spec.algorithm == sluice_core::AlgorithmKind::Concurrency {
        return Ok(None);
    }
    if !matches!(
        spec.algorithm,
        sluice_core::AlgorithmKind::TokenBucket | sluice_core::AlgorithmKind::Gcra
    ) {
        return Err(at(
            on_limit.span(),
            format!(
                "limit `{name}`: on_limit = \"delay\" needs algorithm token_bucket or gcra, not {} (a leaky_bucket without nodelay already delays: its burst is the queue)",
                spec.algorithm.name()
            ),
        ));
    }
    let Some(max_delay) = max_delay else {
        return Err(at(
            on_limit.span(),
            format!(
                "limit `{name}`: on_limit = \"delay\" needs max_delay, the longest a request is held, e.g. max_delay = \"500ms\""
            ),
        ));
    };
    let (delay_ns, extra) = extension(source, name, spec, max_delay)?;
    let extended = LimitSpec {
        burst: spec.burst.saturating_add(extra),
        ..*spec
    };
    extended
        .build()
        .map_err(|e| at(max_delay.span(), format!("limit `{name}`: max_delay: {e}")))?;
    Ok(Some(DelayDef {
        max_delay: delay_ns,
        max_queue,
        extra,
        spec: extended,
    }))
}

/// A `bucket = "shared"` plan rule.
pub(crate) fn compile_cost_rule(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: String,
) -> Result<CostRule, ConfigError> {
    let c = l.get_ref();
    let at = |span: std::ops::Range<usize>, msg: String| source.error_at(Some(span), msg);
    let own_counter = c
        .rate
        .as_ref()
        .map(|r| (r.span(), "rate"))
        .or(c.burst.as_ref().map(|b| (b.span(), "burst")))
        .or(c.on_limit.as_ref().map(|o| (o.span(), "on_limit")))
        .or(c.max_delay.as_ref().map(|o| (o.span(), "max_delay")));
    if let Some((span, field)) = own_counter {
        return Err(at(
            span,
            format!(
                "limit `{name}`: a bucket = \"shared\" rule has no counter of its own, so no `{field}`: it costs `cost` on the plan's main limits"
            ),
        ));
    }
    if c.key.is_some() || c.shadow || c.enforce_percent.is_some() {
        return Err(at(
            l.span(),
            format!(
                "limit `{name}`: a bucket = \"shared\" rule takes only `name`, `match`, `cost` and `bucket`"
            ),
        ));
    }
    let matcher = Matcher::compile(c.matches.get_ref())
        .map_err(|m| at(c.matches.span(), format!("limit `{name}`: {m}")))?;
    if matcher.is_any() {
        return Err(at(
            l.span(),
            format!(
                "limit `{name}`: a bucket = \"shared\" rule needs a `match` (it prices some requests on the plan's bucket)"
            ),
        ));
    }
    Ok(CostRule {
        name,
        matcher,
        cost: c.cost.as_ref().map_or(1, |c| *c.get_ref()),
    })
}

/// A delay limit's `max_delay` in nanoseconds, and its extension: the cost
/// the rate refills in that time (at least one request's).
fn extension(
    source: &Source,
    name: &str,
    spec: &LimitSpec,
    max_delay: &Spanned<String>,
) -> Result<(sluice_core::Nanos, u64), ConfigError> {
    let at = |msg: String| source.error_at(Some(max_delay.span()), msg);
    let delay_ns = sluice_core::parse_duration(max_delay.get_ref()).map_err(|e| {
        at(format!(
            "limit `{name}`: max_delay `{}`: {e}",
            max_delay.get_ref()
        ))
    })?;
    let rate = spec.rate;
    let extra = u128::from(rate.amount()) * u128::from(delay_ns) / u128::from(rate.period().max(1));
    let extra = u64::try_from(extra).unwrap_or(u64::MAX / 2);
    if extra == 0 {
        return Err(at(format!(
            "limit `{name}`: max_delay {} is shorter than one request's interval at {}: no request could ever be delayed",
            max_delay.get_ref(),
            rate
        )));
    }
    Ok((delay_ns, extra))
}
