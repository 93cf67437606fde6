//! `ShouldRateLimit`: Envoy's descriptors in, one status per descriptor out.
//! This module only translates; the engine decides.
//!
//! - Each request descriptor is matched against the [`Rules`]
//!   ([`Rules::resolve`], `replaces` included); its cost is its own
//!   `hits_addend` if set, else the request's (0 meaning 1).
//! - The descriptors that meet a limit become the engine's
//!   [charges](Charge), under the keyed hash of their entries, and are
//!   decided on the engine's one path ([`Engine::decide_charges`]): the
//!   enforced ones all or nothing (if one is over its limit, the answer is
//!   `OVER_LIMIT` and no descriptor consumes anything), shadow-mode ones
//!   counted when the request is admitted and always answering `OK`.
//! - Unmatched and `unlimited` descriptors answer `OK` with no
//!   `current_limit`.
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
use crate::rules::{Limited, Rule, Rules};

/// The Rate Limit Service: the rules over an engine.
#[derive(Debug)]
pub struct EnvoyRls {
    rules: Arc<Rules>,
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
            rules,
            engine,
            unknown_domain_lines: DirectLimiter::new(&lines).ok(),
            unknown_domain_left_out: AtomicU64::new(0),
        }
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
        let rules = if req.domain == self.rules.domain {
            self.rules.resolve(&req.descriptors)
        } else {
            self.unknown_domain(&req.domain);
            vec![None; req.descriptors.len()]
        };
        let hasher = self.engine.hasher();
        let mut places = Vec::with_capacity(rules.len());
        let mut charges: Vec<Charge<'_>> = Vec::with_capacity(rules.len());
        let (mut enforced, mut shadowed) = (0, 0);
        for (d, rule) in req.descriptors.iter().zip(&rules) {
            let Some((rule, limited)) = rule.and_then(|r| Some((r, r.limited.as_ref()?))) else {
                places.push(Place::None);
                continue;
            };
            let cost = cost_of(d, request_hits);
            places.push(if rule.shadow {
                shadowed += 1;
                Place::Shadow(shadowed - 1)
            } else {
                enforced += 1;
                Place::Enforced(enforced - 1)
            });
            charges.push(Charge {
                limit: &limited.limit,
                counter: &limited.counter,
                key: hasher.key_id(&descriptor_key(d)),
                cost,
                shadow: rule.shadow,
            });
        }
        let verdict = if charges.is_empty() {
            None
        } else {
            Some(self.decided(&charges).await)
        };
        Ok(response(&rules, &places, verdict.as_ref()))
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
/// entries, keys and values, with separators no entry can forge.
fn descriptor_key(d: &RateLimitDescriptor) -> String {
    let mut key = String::new();
    for e in &d.entries {
        key.push_str(&e.key);
        key.push('\u{1f}');
        key.push_str(&e.value);
        key.push('\u{1e}');
    }
    key
}

/// The response to a request: one status per descriptor, in order, and
/// the headers.
fn response(
    rules: &[Option<&Arc<Rule>>],
    places: &[Place],
    verdict: Option<&Verdict>,
) -> RateLimitResponse {
    let over = verdict.is_some_and(|v| !v.allowed);
    let statuses = rules
        .iter()
        .zip(places)
        .map(|(rule, place)| {
            let (Some(rule), Some(limited)) = (rule, rule.and_then(|r| r.limited.as_ref())) else {
                return ok_unlimited();
            };
            let decision = match (place, verdict) {
                // An enforced descriptor the verdict does not show (it
                // could not be given) is refused with the request.
                (Place::Enforced(i), Some(v)) => Some(v.results.get(*i).map_or(
                    Decision {
                        allowed: v.allowed,
                        ..Decision::full(limited.limit.spec.burst)
                    },
                    |r| r.decision,
                )),
                (Place::Shadow(i), Some(v)) => v.shadow.get(*i).map(|r| r.decision),
                _ => None,
            };
            status(rule, limited, decision)
        })
        .collect();
    RateLimitResponse {
        overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
        statuses,
        response_headers_to_add: verdict.map(headers).unwrap_or_default(),
        ..Default::default()
    }
}

/// One descriptor's status. A shadow-mode descriptor always answers `OK`;
/// one not counted (in shadow, on a refused request) shows its limit full.
fn status(rule: &Rule, limited: &Limited, decision: Option<Decision>) -> DescriptorStatus {
    let decision = decision.unwrap_or(Decision::full(limited.limit.spec.burst));
    let refused = !decision.allowed && !rule.shadow;
    let until = if refused {
        decision.retry_after.unwrap_or(decision.reset_after)
    } else {
        decision.reset_after
    };
    DescriptorStatus {
        code: if refused { Code::OverLimit } else { Code::Ok } as i32,
        current_limit: Some(CurrentLimit {
            name: rule.name().to_string(),
            requests_per_unit: rule.requests_per_unit,
            unit: rule.unit as i32,
        }),
        limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
        duration_until_reset: Some(duration(until)),
        ..Default::default()
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

fn ok_unlimited() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
}

fn duration(ns: Nanos) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from(ns % 1_000_000_000).unwrap_or(0),
    }
}
