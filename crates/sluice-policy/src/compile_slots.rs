//! Compiling a concurrency limit (`algorithm = "concurrency"`): its
//! `max_in_flight` and `lease`, as the spec a store counts (`max_in_flight`
//! per lease: the spec's window is the lease), its cost, and its wait for
//! a slot (`on_limit = "delay"`).

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use toml::Spanned;

use crate::compile_limit::DelayFields;
use crate::config::{ConfigError, LimitConfig, PlanConfig, Source};
use crate::slot_wait::SlotWait;

/// A lease when the limit names none: one minute.
pub const DEFAULT_LEASE: &str = "60s";

/// A concurrency limit's spec and the cost of one matching request (1 by
/// default: one slot).
pub(crate) fn slots_and_cost(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
) -> Result<(LimitSpec, u64), ConfigError> {
    let c = l.get_ref();
    let at = |span: Option<std::ops::Range<usize>>, m: String| {
        source.error_at(span.or(Some(l.span())), format!("limit `{name}`: {m}"))
    };
    for (field, span) in [
        ("rate", c.rate.as_ref().map(Spanned::span)),
        ("burst", c.burst.as_ref().map(Spanned::span)),
    ] {
        if let Some(span) = span {
            return Err(at(
                Some(span),
                format!(
                    "a concurrency limit has no {field}: it counts requests in flight (`max_in_flight`)"
                ),
            ));
        }
    }
    let max = match &c.max_in_flight {
        Some(m) if *m.get_ref() >= 1 => *m.get_ref(),
        Some(m) => {
            return Err(at(
                Some(m.span()),
                "max_in_flight must be at least 1".into(),
            ));
        }
        None => return Err(at(None, "missing field `max_in_flight` (e.g. 5)".into())),
    };
    let lease_text = c
        .lease
        .as_ref()
        .map_or(DEFAULT_LEASE, |t| t.get_ref().as_str());
    let lease_span = c.lease.as_ref().map(Spanned::span);
    let lease = sluice_core::parse_duration(lease_text)
        .map_err(|e| at(lease_span.clone(), format!("lease: `{lease_text}`: {e}")))?;
    if lease == 0 {
        return Err(at(lease_span, "lease must be longer than 0".into()));
    }
    let rate = Rate::new(max, lease)
        .ok_or_else(|| at(lease_span.clone(), "lease: out of range".into()))?;
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Concurrency,
        rate,
        burst: max,
        nodelay: false,
    };
    spec.build()
        .map_err(|e| at(lease_span, format!("lease: {e}")))?;
    let cost = c.cost.as_ref().map_or(1, |c| *c.get_ref());
    if cost > max {
        let span = c.cost.as_ref().map(Spanned::span);
        return Err(at(
            span,
            format!("cost {cost} exceeds max_in_flight {max}: no matching request could ever pass"),
        ));
    }
    Ok((spec, cost))
}

/// A concurrency limit's `on_limit = "delay"` (its own, or its plan's):
/// the waiting room of its requests, with `max_delay` the longest wait
/// and `max_queue` (100 by default) the most waiting at once.
pub(crate) fn slot_wait(
    source: &Source,
    l: &Spanned<LimitConfig>,
    name: &str,
    plan: Option<&PlanConfig>,
) -> Result<Option<SlotWait>, ConfigError> {
    let Some(fields) = DelayFields::of(source, l.get_ref(), name, plan)? else {
        return Ok(None);
    };
    let at = |span: std::ops::Range<usize>, m: String| {
        source.error_at(Some(span), format!("limit `{name}`: {m}"))
    };
    let Some(max_delay) = fields.max_delay else {
        return Err(at(
            fields.on_limit.span(),
            "on_limit = \"delay\" needs max_delay, the longest a request waits for a slot, e.g. max_delay = \"2s\"".into(),
        ));
    };
    let max_wait = sluice_core::parse_duration(max_delay.get_ref()).map_err(|e| {
        at(
            max_delay.span(),
            format!("max_delay `{}`: {e}", max_delay.get_ref()),
        )
    })?;
    Ok(Some(SlotWait::new(max_wait, fields.max_queue)))
}
