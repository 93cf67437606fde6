//! The answer's statuses, overall code and headers, from the rules each
//! descriptor met and the engine's verdict.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluice_core::{Decision, Nanos};
use sluice_policy::{LimitResult, Verdict};

use crate::answer::{Options, Place};
use crate::rules::{Rule, RuleKind};

/// The statuses and the overall code: one status per descriptor, in order
/// (`rules`: the rule each met). The request is over the limit when an
/// enforced descriptor is (the engine refused it), when a descriptor meets
/// a limit of 0, or when every quota-mode descriptor is over its limit.
///
/// `verdicts` are the engine's on the charges and on the refunds.
/// `decisions` gets each counted descriptor's decision (`None` for the
/// others), for the statistics.
pub(crate) fn statuses(
    rules: &[Option<&Rule>],
    places: &[Place],
    [verdict, refunded]: [Option<&Verdict>; 2],
    options: &Options,
    decisions: &mut smallvec::SmallVec<[Option<Decision>; 4]>,
) -> (Code, Vec<DescriptorStatus>) {
    let (mut quotas, mut quotas_over, mut over) = (0, 0, false);
    let statuses = rules
        .iter()
        .zip(places)
        .map(|(rule, place)| {
            if let Place::Refund(at) = place {
                // Never refused, and no part of the request's answer.
                let decided = at
                    .and_then(|i| refunded?.results.get(i))
                    .map(|r| r.decision);
                decisions.push(decided);
                return match rule {
                    None => ok_unmatched(),
                    Some(rule) => refund_status(rule, decided, options),
                };
            }
            let decided = match (place, verdict) {
                (Place::Enforced(i), Some(v)) => v.results.get(*i).map(|r| r.decision),
                (Place::Shadow(i), Some(v)) => v.shadow.get(*i).map(|r| r.decision),
                _ => None,
            };
            decisions.push(decided);
            let Some(rule) = rule else {
                return ok_unmatched();
            };
            let st = match (&rule.kind, place, verdict) {
                (RuleKind::Unlimited, ..) => return ok_unlimited(),
                (RuleKind::Zero, ..) => zero_status(rule, options),
                // An enforced descriptor the verdict does not show (it could
                // not be given) is refused with the request.
                (RuleKind::Counted(limited), Place::Enforced(_), Some(v)) if decided.is_none() => {
                    let refused = Decision {
                        allowed: v.allowed,
                        ..Decision::full(limited.limit.spec.burst)
                    };
                    status(rule, Some(refused), options)
                }
                (RuleKind::Counted(_), ..) => status(rule, decided, options),
            };
            let refused = st.code == Code::OverLimit as i32;
            // A shadow-mode rule only shadows, in quota mode too (the
            // engine's quota charges are the same: `answer::counting`).
            if rule.quota && (options.compat || !rule.shadow) {
                quotas += 1;
                quotas_over += usize::from(refused);
            } else {
                over |= refused;
            }
            st
        })
        .collect();
    let over = over || (quotas > 0 && quotas == quotas_over);
    (if over { Code::OverLimit } else { Code::Ok }, statuses)
}

/// One descriptor's status. A shadow-mode descriptor always answers `OK`;
/// one not counted (in shadow, on a refused request) shows its limit full.
fn status(rule: &Rule, decision: Option<Decision>, options: &Options) -> DescriptorStatus {
    let full = rule.limited().map_or(0, |l| l.limit.spec.burst);
    let decision = decision.unwrap_or(Decision::full(full));
    let refused = !decision.allowed && !rule.shadow;
    let until = if let (true, Some(unit)) = (options.compat, rule.unit) {
        // The reference server: the end of the unit's clock-aligned window.
        window_end(unit)
    } else if refused {
        decision.retry_after.unwrap_or(decision.reset_after)
    } else {
        decision.reset_after
    };
    DescriptorStatus {
        code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(current_limit(rule, options)),
        limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(until)),
        ..Default::default()
    }
}

/// A refund's status: `OK`, with the state the refund left (an
/// `unlimited` rule's as always; a limit of 0 has nothing to give back).
fn refund_status(rule: &Rule, decided: Option<Decision>, options: &Options) -> DescriptorStatus {
    match &rule.kind {
        RuleKind::Unlimited => ok_unlimited(),
        RuleKind::Zero => DescriptorStatus {
            code: Code::Ok as i32,
            ..zero_status(rule, options)
        },
        RuleKind::Counted(_) => DescriptorStatus {
            code: Code::Ok as i32,
            ..status(rule, decided, options)
        },
    }
}

/// The status of a descriptor on a limit of 0: over it (`OK` in shadow
/// mode), until the unit's clock-aligned window ends.
fn zero_status(rule: &Rule, options: &Options) -> DescriptorStatus {
    DescriptorStatus {
        code: if rule.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit: Some(current_limit(rule, options)),
        limit_remaining: 0,
        duration_until_reset: Some(duration(rule.unit.map_or(0, window_end))),
        ..Default::default()
    }
}

/// The time until a unit, aligned on the Unix clock, ends.
fn window_end(unit: crate::rules::Unit) -> Nanos {
    let unit = unit.seconds();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    (unit - now % unit) * 1_000_000_000
}

/// A status's `current_limit`: named as the file names it in `compat`
/// mode (empty without a `name`), else by its Sluice name. A concurrency
/// limit answers `max_in_flight` as `requests_per_unit`, with the unit
/// `UNKNOWN` (0): it counts requests in flight, not per any unit of time.
fn current_limit(rule: &Rule, options: &Options) -> CurrentLimit {
    CurrentLimit {
        name: if options.compat {
            rule.given_name.clone()
        } else {
            rule.name().to_string()
        },
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit.map_or(0, |u| u as i32),
    }
}

/// The headers of an answer: who decided when a fallback did, then (with
/// `response_headers`) Sluice's fields or, in `compat` mode, the reference
/// server's.
pub(crate) fn headers(
    verdict: Option<&Verdict>,
    zero: bool,
    response: &RateLimitResponse,
    places: &[Place],
    options: &Options,
) -> Vec<HeaderValue> {
    let mut out = Vec::new();
    if let Some(f) = verdict.and_then(|v| v.fallback) {
        out.push(header("Sluice-Fallback", f.name().to_owned()));
    }
    if options.response_headers {
        if options.compat {
            reference_headers(response, places, &mut out);
        } else if let Some(v) = verdict {
            sluice_headers(v, zero, response, places, &mut out);
        }
    }
    out
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

/// The enforced limits' `RateLimit-Policy` and `RateLimit` fields, and
/// `Retry-After` when over the limit: for a request an enforced limit
/// refused, when every refusing limit admits it again; for one refused
/// because every quota-mode descriptor is over, when the first of them
/// admits it again. A request that can never pass (an impossible cost, a
/// limit of 0: `zero`) has no retry time.
fn sluice_headers(
    v: &Verdict,
    zero: bool,
    response: &RateLimitResponse,
    places: &[Place],
    out: &mut Vec<HeaderValue>,
) {
    let results: &[LimitResult] = &v.results;
    if let Some(value) = sluice_headers::policy_field(results) {
        out.push(header("RateLimit-Policy", value));
    }
    if let Some(value) = sluice_headers::ratelimit_field(results) {
        out.push(header("RateLimit", value));
    }
    if response.overall_code != Code::OverLimit as i32 {
        return;
    }
    let retry = if zero || v.violated().any(|r| r.decision.retry_after.is_none()) {
        None
    } else if v.violated().next().is_some() {
        v.retry_after()
    } else {
        quota_retry(v, response, places)
    };
    if let Some(retry) = retry {
        out.push(header(
            "Retry-After",
            sluice_headers::retry_after_secs(retry).to_string(),
        ));
    }
}

/// When a request refused for its quotas could pass: the soonest time one
/// of its over-limit quota-mode descriptors (the shadowed charges that
/// answer `OVER_LIMIT`; outside `compat`, a shadow-mode one never does)
/// admits it again, from the engine's decisions.
fn quota_retry(v: &Verdict, response: &RateLimitResponse, places: &[Place]) -> Option<Nanos> {
    response
        .statuses
        .iter()
        .zip(places)
        .filter_map(|(s, p)| match p {
            Place::Shadow(i) if s.code == Code::OverLimit as i32 => v.shadow.get(*i),
            _ => None,
        })
        .filter_map(|r| r.decision.retry_after)
        .min()
}

/// The reference server's headers (`LIMIT_RESPONSE_HEADERS_ENABLED`):
/// `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset` of the
/// descriptor nearest its limit: the last one over it, else the one with
/// the least remaining.
fn reference_headers(response: &RateLimitResponse, places: &[Place], out: &mut Vec<HeaderValue>) {
    let mut nearest: Option<&DescriptorStatus> = None;
    // Refunds are not counted.
    for (s, _) in response
        .statuses
        .iter()
        .zip(places)
        .filter(|(_, p)| !matches!(p, Place::Refund(_)))
    {
        let Some(_) = &s.current_limit else { continue };
        let over = s.code == Code::OverLimit as i32;
        if over || nearest.is_none_or(|n| s.limit_remaining < n.limit_remaining) {
            nearest = Some(s);
        }
    }
    let Some((s, limit)) = nearest.and_then(|s| Some((s, s.current_limit.as_ref()?))) else {
        return;
    };
    let remaining = if s.code == Code::OverLimit as i32 {
        0
    } else {
        s.limit_remaining
    };
    let reset = s.duration_until_reset.map_or(0, |d| d.seconds);
    out.push(header(
        "RateLimit-Limit",
        limit.requests_per_unit.to_string(),
    ));
    out.push(header("RateLimit-Remaining", remaining.to_string()));
    out.push(header("RateLimit-Reset", reset.to_string()));
}

/// A descriptor that meets no rule: `OK`, with no limit.
fn ok_unmatched() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

/// An `unlimited` descriptor: `OK`, with the most a status can say
/// remaining (4294967295, as the reference server answers).
fn ok_unlimited() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining: u32::MAX,
        ..Default::default()
    }
}

fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}
