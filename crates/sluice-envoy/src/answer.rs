//! `ShouldRateLimit`: Envoy's descriptors in, one status per descriptor out.
//! This module only translates; the engine decides.
//!
//! - Each request descriptor is matched against the [`Rules`] of the
//!   request's domain ([`Rules::resolve`], `replaces` included); its cost is
//!   its own `hits_addend` if set, else the request's (0 meaning 1).
//! - The descriptors that meet a limit become the engine's
//!   [charges](Charge), under the keyed hash of their entries (an entry
//!   matched by a `share_threshold` wildcard counts as the pattern), and are
//!   decided on the engine's one path ([`Engine::decide_charges`]): the
//!   enforced ones all or nothing (if one is over its limit, the answer is
//!   `OVER_LIMIT` and no descriptor consumes anything); shadow-mode and
//!   quota-mode ones after them, each on its own, counted when the request
//!   is admitted.
//! - A shadow-mode descriptor always answers `OK`. A quota-mode descriptor
//!   over its limit answers `OVER_LIMIT`, but refuses the request only when
//!   every quota-mode descriptor of the request is over (as in the
//!   reference server).
//! - A descriptor on a limit of 0 (`requests_per_unit: 0`) refuses the
//!   request; nothing is charged.
//! - Unmatched descriptors answer `OK` with no `current_limit`; `unlimited`
//!   ones `OK` with `limit_remaining` 4294967295, as the reference server
//!   does.
//! - Every other status carries `current_limit`, `limit_remaining` and
//!   `duration_until_reset` (for a refused descriptor: until it could pass);
//!   `response_headers_to_add` carries the `RateLimit-Policy`/`RateLimit`
//!   fields, and `Retry-After` when over the limit.
//! - A descriptor whose cost exceeds its limit's burst (alone, or with the
//!   same descriptor repeated) can never pass: the engine refuses the
//!   request and charges nothing; that descriptor answers `OVER_LIMIT`
//!   without a retry time, and the others show their state unchanged.
//! - On a shared store, when Redis cannot decide, the store's fallback does
//!   and the answer carries `Sluice-Fallback: local|allow|deny`; the `deny`
//!   fallback answers `OVER_LIMIT` for every enforced descriptor (Envoy
//!   then refuses with 429), whatever the filter's `failure_mode_deny`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluice_core::{AlgorithmKind, Decision, LimitSpec, Nanos, Rate};
use sluice_policy::{Charge, Engine, LimitResult, Verdict};
use sluice_store::DirectLimiter;

use crate::request::{InvalidRequest, validate};
use crate::rules::{Found, Rule, RuleKind, Rules};

/// The Rate Limit Service: the rules over an engine.
#[derive(Debug)]
pub struct EnvoyRls {
    /// Replaced whole on reload; each call reads one set from start to end.
    rules: ArcSwap<Rules>,
    engine: Arc<Engine>,
    /// Lines about unknown domains (the client names the domain): at most
    /// one a second, in bursts of five; the rest are counted.
    unknown_domain_lines: Option<DirectLimiter>,
    unknown_domain_left_out: AtomicU64,
}

/// Where a descriptor's decision is in the engine's verdict.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// No limit: unmatched or `unlimited`.
    None,
    /// The n-th enforced charge.
    Enforced(usize),
    /// The n-th shadowed charge.
    Shadow(usize),
}

impl EnvoyRls {
    /// A service over compiled rules, deciding on `engine`: the rules'
    /// counters must be registered with the engine's store (see
    /// [`Rules::load`]), and descriptors are named by the engine's hasher
    /// (on a shared store, keyed by the secret every instance shares).
    pub fn new(rules: Arc<Rules>, engine: Arc<Engine>) -> Self {
        let lines = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(1),
            burst: 5,
            nodelay: true,
        };
        Self {
            rules: ArcSwap::new(rules),
            engine,
            unknown_domain_lines: DirectLimiter::new(&lines).ok(),
            unknown_domain_left_out: AtomicU64::new(0),
        }
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// Replaces the rules (a reload): calls being decided finish on the old
    /// ones. A rule whose counter id is unchanged keeps its counts, since
    /// counters live in the engine's store.
    pub fn replace_rules(&self, rules: Arc<Rules>) {
        self.rules.store(rules);
    }

    /// Logs a request for a domain the rules do not have, unless too many
    /// were logged lately; the domain is cut to 64 characters.
    fn unknown_domain(&self, domain: &str) {
        let may_log = self
            .unknown_domain_lines
            .as_ref()
            .is_some_and(|l| l.check(1).is_ok_and(|d| d.allowed));
        if !may_log {
            self.unknown_domain_left_out.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let shown: String = domain.chars().take(64).collect();
        let left_out = self.unknown_domain_left_out.swap(0, Ordering::Relaxed);
        tracing::warn!(domain = %shown, left_out, "ShouldRateLimit for an unknown domain: allowed");
    }

    /// Decides one `ShouldRateLimit` request, once it passes [`validate`]:
    /// a request that does not is refused before any match or count.
    pub async fn decide(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, InvalidRequest> {
        validate(req)?;
        let request_hits = if req.hits_addend == 0 {
            1
        } else {
            u64::from(req.hits_addend)
        };
        let rules_now = self.rules.load();
        if !rules_now.has_domain(&req.domain) {
            self.unknown_domain(&req.domain);
        }
        let found = rules_now.resolve(&req.domain, &req.descriptors);
        let hasher = self.engine.hasher();
        // A descriptor on a limit of 0 refuses the request: nothing else
        // is charged (the others are only read).
        let zero = found
            .iter()
            .flatten()
            .any(|f| matches!(f.rule.kind, RuleKind::Zero) && !f.rule.shadow && !f.rule.quota);
        let mut places = Vec::with_capacity(found.len());
        let mut charges: Vec<Charge<'_>> = Vec::with_capacity(found.len());
        let (mut enforced, mut later) = (0, 0);
        for (d, f) in req.descriptors.iter().zip(&found) {
            let Some((f, limited)) = f.as_ref().and_then(|f| Some((f, f.rule.limited()?))) else {
                places.push(Place::None);
                continue;
            };
            // Shadow-mode and quota-mode descriptors are decided after the
            // others, each on its own, only for a request they admit.
            let after = f.rule.shadow || f.rule.quota;
            if after && zero {
                places.push(Place::None);
                continue;
            }
            places.push(if after {
                later += 1;
                Place::Shadow(later - 1)
            } else {
                enforced += 1;
                Place::Enforced(enforced - 1)
            });
            charges.push(Charge {
                limit: &limited.limit,
                counter: &limited.counter,
                key: hasher.key_id(&descriptor_key(d, &f.shared)),
                cost: if zero { 0 } else { cost_of(d, request_hits) },
                shadow: after,
            });
        }
        let verdict = if charges.is_empty() {
            None
        } else {
            Some(self.decided(&charges).await)
        };
        Ok(response(&found, &places, verdict.as_ref(), zero))
    }

    /// The engine's verdict on the charges. A verdict it cannot give (a
    /// counter registered with another store: a bug) is logged, and every
    /// limited descriptor is answered over its limit.
    async fn decided(&self, charges: &[Charge<'_>]) -> Verdict {
        match self.engine.decide_charges(charges).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "ShouldRateLimit: cannot decide");
                Verdict {
                    allowed: false,
                    results: Default::default(),
                    shadow: Vec::new(),
                    style: Default::default(),
                    fallback: None,
                }
            }
        }
    }
}

/// A descriptor's cost: its own `hits_addend`, else the request's. Giving
/// quota back (`is_negative_hits`) is not supported: such a descriptor
/// only peeks.
fn cost_of(d: &RateLimitDescriptor, request_hits: u64) -> u64 {
    match (&d.hits_addend, d.is_negative_hits) {
        (_, true) => 0,
        (Some(h), false) => h.value,
        (None, false) => request_hits,
    }
}

/// What a descriptor's counter is named by (before the keyed hash): its
/// entries, keys and values, with separators no entry can forge. An entry
/// matched by a `share_threshold` wildcard counts as the pattern (marked,
/// so that no value can be mistaken for it).
fn descriptor_key(d: &RateLimitDescriptor, shared: &[(usize, &str)]) -> String {
    let mut key = String::new();
    for (i, e) in d.entries.iter().enumerate() {
        key.push_str(&e.key);
        key.push('\u{1f}');
        match shared.iter().find(|(at, _)| *at == i) {
            Some((_, pattern)) => {
                key.push('\u{1d}');
                key.push_str(pattern);
            }
            None => key.push_str(&e.value),
        }
        key.push('\u{1e}');
    }
    key
}

/// The response to a request: one status per descriptor, in order, and
/// the headers. The request is over the limit when the engine refused it,
/// when a descriptor meets a limit of 0, or when every quota-mode
/// descriptor is over its limit.
fn response(
    found: &[Option<Found<'_>>],
    places: &[Place],
    verdict: Option<&Verdict>,
    zero: bool,
) -> RateLimitResponse {
    let (mut quotas, mut quotas_over) = (0, 0);
    let statuses = found
        .iter()
        .zip(places)
        .map(|(f, place)| {
            let Some(rule) = f.as_ref().map(|f| &**f.rule) else {
                return ok_unmatched();
            };
            let st = match (&rule.kind, place, verdict) {
                (RuleKind::Unlimited, ..) => return ok_unlimited(),
                (RuleKind::Zero, ..) => zero_status(rule),
                (RuleKind::Counted(limited), Place::Enforced(i), Some(v)) => {
                    // An enforced descriptor the verdict does not show (it
                    // could not be given) is refused with the request.
                    let d = v.results.get(*i).map_or(
                        Decision {
                            allowed: v.allowed,
                            ..Decision::full(limited.limit.spec.burst)
                        },
                        |r| r.decision,
                    );
                    status(rule, Some(d))
                }
                (RuleKind::Counted(_), Place::Shadow(i), Some(v)) => {
                    status(rule, v.shadow.get(*i).map(|r| r.decision))
                }
                (RuleKind::Counted(_), ..) => status(rule, None),
            };
            if rule.quota {
                quotas += 1;
                quotas_over += usize::from(st.code == Code::OverLimit as i32);
            }
            st
        })
        .collect();
    let over = verdict.is_some_and(|v| !v.allowed) || zero || (quotas > 0 && quotas == quotas_over);
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: verdict.map(headers).unwrap_or_default(),
        ..Default::default()
    }
}

/// One descriptor's status. A shadow-mode descriptor always answers `OK`;
/// one not counted (in shadow, on a refused request) shows its limit full.
fn status(rule: &Rule, decision: Option<Decision>) -> DescriptorStatus {
    let full = rule.limited().map_or(0, |l| l.limit.spec.burst);
    let decision = decision.unwrap_or(Decision::full(full));
    let refused = !decision.allowed && !rule.shadow;
    let until = if refused {
        decision.retry_after.unwrap_or(decision.reset_after)
    } else {
        decision.reset_after
    };
    DescriptorStatus {
        code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(current_limit(rule)),
        limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(until)),
        ..Default::default()
    }
}

/// The status of a descriptor on a limit of 0: over it (`OK` in shadow
/// mode), until the unit's clock-aligned window ends.
fn zero_status(rule: &Rule) -> DescriptorStatus {
    let unit = rule.unit.seconds();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DescriptorStatus {
        code: if rule.shadow {
            Code::Ok
        } else {
            Code::OverLimit
        } as i32,
        current_limit: Some(current_limit(rule)),
        limit_remaining: 0,
        duration_until_reset: Some(duration((unit - now % unit) * 1_000_000_000)),
        ..Default::default()
    }
}

fn current_limit(rule: &Rule) -> CurrentLimit {
    CurrentLimit {
        name: rule.name().to_string(),
        requests_per_unit: rule.requests_per_unit,
        unit: rule.unit as i32,
    }
}

/// The headers of an answer: who decided when a fallback did, the
/// enforced limits' `RateLimit-Policy` and `RateLimit` fields, and
/// `Retry-After` when over the limit.
fn headers(v: &Verdict) -> Vec<HeaderValue> {
    let mut out = Vec::new();
    let mut add = |key: &str, value: String| {
        out.push(HeaderValue {
            key: key.to_owned(),
            value,
            ..Default::default()
        });
    };
    if let Some(f) = v.fallback {
        add("Sluice-Fallback", f.name().to_owned());
    }
    let results: &[LimitResult] = &v.results;
    if let Some(value) = sluice_headers::policy_field(results) {
        add("RateLimit-Policy", value);
    }
    if let Some(value) = sluice_headers::ratelimit_field(results) {
        add("RateLimit", value);
    }
    // A request that can never pass has no retry time.
    if let Some(retry) = v.retry_after().filter(|_| !v.allowed) {
        add(
            "Retry-After",
            sluice_headers::retry_after_secs(retry).to_string(),
        );
    }
    out
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
