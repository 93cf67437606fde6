//! `ShouldRateLimit`: Envoy's descriptors in, one status per descriptor out.
//!
//! - Each request descriptor is matched against the [`Rules`]; its cost is
//!   its own `hits_addend` if set, else the request's (0 meaning 1).
//! - The descriptors that meet an enforced limit are decided together,
//!   all-or-nothing: if one is over its limit, the answer is `OVER_LIMIT`
//!   and no descriptor consumes anything.
//! - Shadow-mode limits count, but always answer `OK`. Unmatched and
//!   `unlimited` descriptors answer `OK` with no `current_limit`.
//! - Every status carries `current_limit`, `limit_remaining` and
//!   `duration_until_reset` (for a refused descriptor: until it could pass);
//!   `response_headers_to_add` carries the `RateLimit-Policy`/`RateLimit`
//!   fields, and `Retry-After` when over the limit.
//! - On a shared store (see [`EnvoyRls::new`]), the counters live in
//!   Redis. When Redis cannot decide, the store's fallback does and the
//!   answer carries `Sluice-Fallback: local|allow|deny`; the `deny`
//!   fallback answers `OVER_LIMIT` for every enforced descriptor (Envoy
//!   then refuses with 429), whatever the filter's `failure_mode_deny`.
//!
//! Hostile or broken requests are refused with `INVALID_ARGUMENT` before
//! anything is decided or counted ([`InvalidRequest`]): an empty `domain`,
//! an empty descriptor list (as envoyproxy/ratelimit refuses both), more
//! than [`MAX_DESCRIPTORS`] descriptors, or a descriptor of more than
//! [`MAX_ENTRIES`] entries. [`serve`] reads messages of at most
//! [`MAX_MESSAGE_BYTES`] and keeps idle connections checked with HTTP/2
//! and TCP keepalives.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit as CurrentLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluice_core::{Decision, Nanos};
use sluice_policy::LimitResult;
use sluice_store::seam::Store;
use sluice_store::{KeyHasher, KeyId};
use tonic::{Request, Response, Status};

use crate::counters::{Count, Counters};
use crate::rules::{Rule, Rules};

/// The most descriptors one `ShouldRateLimit` request may carry. Envoy
/// sends one per matched rate-limit action, a handful in practice; each
/// costs a match and a counter.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries one descriptor may carry. A descriptor's entries are
/// matched one per level of the config's nesting, which is rarely more than
/// a few deep.
pub const MAX_ENTRIES: usize = 32;

/// The largest request message the server decodes, in bytes (tonic's default
/// is 4 MiB). A `ShouldRateLimit` request is usually a few hundred bytes;
/// one past this limit is refused with `OUT_OF_RANGE` from its length
/// prefix, before it is buffered.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// How often the server pings an HTTP/2 connection, to find dead peers.
pub const HTTP2_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long the server waits for a ping's answer before it closes the
/// connection.
pub const HTTP2_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an accepted TCP connection stays idle before the kernel sends
/// keepalive probes.
pub const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

/// Why a `ShouldRateLimit` request is refused before anything is decided:
/// answered with gRPC status `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    /// The request names no domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// The request carries no descriptor.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// The request carries more than [`MAX_DESCRIPTORS`] descriptors.
    #[error("{given} rate limit descriptors: at most {MAX_DESCRIPTORS} are allowed in one request")]
    TooManyDescriptors {
        /// How many the request carries.
        given: usize,
    },
    /// A descriptor carries more than [`MAX_ENTRIES`] entries.
    #[error(
        "rate limit descriptor {index} has {given} entries: at most {MAX_ENTRIES} are allowed in one descriptor"
    )]
    TooManyEntries {
        /// The descriptor's position in the request, from 0.
        index: usize,
        /// How many entries it carries.
        given: usize,
    },
}

impl From<InvalidRequest> for Status {
    fn from(e: InvalidRequest) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

/// Checks a request's shape: [`InvalidRequest`] says what is wrong.
pub fn validate(req: &RateLimitRequest) -> Result<(), InvalidRequest> {
    if req.domain.is_empty() {
        return Err(InvalidRequest::EmptyDomain);
    }
    if req.descriptors.is_empty() {
        return Err(InvalidRequest::NoDescriptors);
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(InvalidRequest::TooManyDescriptors {
            given: req.descriptors.len(),
        });
    }
    match req
        .descriptors
        .iter()
        .position(|d| d.entries.len() > MAX_ENTRIES)
    {
        Some(index) => Err(InvalidRequest::TooManyEntries {
            index,
            given: req.descriptors[index].entries.len(),
        }),
        None => Ok(()),
    }
}

/// The Rate Limit Service.
#[derive(Debug)]
pub struct EnvoyRls {
    rules: Arc<Rules>,
    counters: Counters,
    hasher: KeyHasher,
}

/// One descriptor's match.
struct Matched<'a> {
    rule: Option<&'a Arc<Rule>>,
    cost: u64,
    key: String,
}

impl EnvoyRls {
    /// A service over compiled rules whose limits live in `store` (the
    /// store they were compiled with: see [`Rules::load`]).
    pub fn new(rules: Arc<Rules>, store: Arc<dyn Store>) -> Self {
        Self {
            rules,
            counters: Counters(store),
            hasher: KeyHasher::random(),
        }
    }

    /// Names descriptors' counters with `hasher`. On a store shared by
    /// instances it must be keyed by the secret every instance shares, so
    /// that they name a descriptor's counters alike.
    pub fn with_hasher(mut self, hasher: KeyHasher) -> Self {
        self.hasher = hasher;
        self
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
        let known_domain = req.domain == self.rules.domain;
        if !known_domain {
            tracing::warn!(domain = %req.domain, "ShouldRateLimit for an unknown domain: allowed");
        }
        let mut matched: Vec<Matched<'_>> = req
            .descriptors
            .iter()
            .map(|d| self.match_one(d, request_hits, known_domain))
            .collect();
        // A matched rule that another matched rule replaces does not apply.
        let replaced: Vec<String> = matched
            .iter()
            .filter_map(|m| m.rule)
            .flat_map(|r| r.replaces.iter().cloned())
            .collect();
        for m in &mut matched {
            if m.rule
                .is_some_and(|r| replaced.iter().any(|n| **n == **r.name()))
            {
                m.rule = None;
            }
        }

        let enforced = |m: &Matched<'_>| m.rule.is_some_and(|r| !r.shadow && r.limited.is_some());
        let impossible = matched.iter().any(|m| {
            m.rule
                .and_then(|r| r.limited.as_ref())
                .is_some_and(|l| m.cost > l.spec.burst)
        });
        // Each descriptor's key, hashed once.
        let ids: Vec<KeyId> = matched.iter().map(|m| self.hasher.key_id(&m.key)).collect();
        let counts: Vec<Count<'_>> = matched
            .iter()
            .zip(&ids)
            .filter(|(m, _)| enforced(m))
            .filter_map(|(m, &key)| {
                let limited = m.rule?.limited.as_ref()?;
                let cost = if impossible {
                    0
                } else {
                    m.cost.min(limited.spec.burst)
                };
                Some(Count { limited, key, cost })
            })
            .collect();
        let counted = self.counters.check(&counts).await;
        // Shadow-mode descriptors are counted each on its own, never
        // refusing: all at once, after the enforced ones.
        let shadow_counts: Vec<Count<'_>> = matched
            .iter()
            .zip(&ids)
            .filter(|(m, _)| !enforced(m))
            .filter_map(|(m, &key)| {
                let limited = m.rule?.limited.as_ref()?;
                Some(Count {
                    limited,
                    key,
                    cost: m.cost.min(limited.spec.burst),
                })
            })
            .collect();
        let shadowed = self.counters.check_each(&shadow_counts).await;
        let fallback = counted.fallback.or(shadowed.fallback);
        let mut decisions = counted.decisions.into_iter();
        let mut shadow_decisions = shadowed.decisions.into_iter();

        let mut statuses = Vec::with_capacity(matched.len());
        let mut results = Vec::new();
        let mut over = false;
        let mut retry: Nanos = 0;
        for (m, &key) in matched.iter().zip(&ids) {
            let Some(rule) = m.rule else {
                statuses.push(ok_unlimited());
                continue;
            };
            let Some(limited) = &rule.limited else {
                statuses.push(ok_unlimited());
                continue;
            };
            let decision = if enforced(m) {
                let mut d = decisions
                    .next()
                    .unwrap_or(Decision::full(limited.spec.burst));
                if impossible && m.cost > limited.spec.burst {
                    d.allowed = false;
                    d.retry_after = Some(Nanos::MAX);
                }
                d
            } else {
                // Shadow mode: counted above, never refuses.
                shadow_decisions
                    .next()
                    .unwrap_or(Decision::full(limited.spec.burst))
            };
            let refused = !decision.allowed && !rule.shadow;
            if refused {
                over = true;
                retry = retry.max(decision.retry_after.unwrap_or(0));
            }
            let until = if refused {
                decision.retry_after.unwrap_or(decision.reset_after)
            } else {
                decision.reset_after
            };
            statuses.push(DescriptorStatus {
                code: if refused { Code::OverLimit } else { Code::Ok } as i32,
                current_limit: Some(CurrentLimit {
                    name: rule.name().to_string(),
                    requests_per_unit: rule.requests_per_unit,
                    unit: rule.unit as i32,
                }),
                limit_remaining: u32::try_from(decision.remaining).unwrap_or(u32::MAX),
                duration_until_reset: Some(duration(until)),
                ..Default::default()
            });
            if !rule.shadow {
                results.push(LimitResult {
                    spec: limited.spec,
                    decision,
                    labels: rule.labels.clone(),
                    key,
                });
            }
        }

        let mut headers = Vec::new();
        let mut add = |key: &str, value: String| {
            headers.push(HeaderValue {
                key: key.to_owned(),
                value,
                ..Default::default()
            });
        };
        if let Some(f) = fallback {
            add("Sluice-Fallback", f.name().to_owned());
        }
        if let Some(v) = sluice_headers::policy_field(&results) {
            add("RateLimit-Policy", v);
        }
        if let Some(v) = sluice_headers::ratelimit_field(&results) {
            add("RateLimit", v);
        }
        if over {
            add(
                "Retry-After",
                sluice_headers::retry_after_secs(retry).to_string(),
            );
        }
        Ok(RateLimitResponse {
            overall_code: if over { Code::OverLimit } else { Code::Ok } as i32,
            statuses,
            response_headers_to_add: headers,
            ..Default::default()
        })
    }

    fn match_one<'a>(
        &'a self,
        d: &RateLimitDescriptor,
        request_hits: u64,
        known: bool,
    ) -> Matched<'a> {
        let cost = match (&d.hits_addend, d.is_negative_hits) {
            // Giving quota back is not supported: such a descriptor only peeks.
            (_, true) => 0,
            (Some(h), false) => h.value,
            (None, false) => request_hits,
        };
        let rule = if known {
            self.rules
                .find(d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str())))
        } else {
            None
        };
        let mut key = String::new();
        for e in &d.entries {
            key.push_str(&e.key);
            key.push('\u{1f}');
            key.push_str(&e.value);
            key.push('\u{1e}');
        }
        Matched { rule, cost, key }
    }
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

#[tonic::async_trait]
impl RateLimitService for EnvoyRls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        match self.decide(request.get_ref()).await {
            Ok(response) => Ok(Response::new(response)),
            Err(e) => {
                tracing::debug!(error = %e, "ShouldRateLimit refused: invalid request");
                Err(e.into())
            }
        }
    }
}

/// Serves the Rate Limit Service and `grpc.health.v1` on `listener` until
/// `shutdown` completes: messages of at most [`MAX_MESSAGE_BYTES`], HTTP/2
/// pings every [`HTTP2_KEEPALIVE_INTERVAL`] (a connection that does not
/// answer within [`HTTP2_KEEPALIVE_TIMEOUT`] is closed) and TCP keepalive
/// after [`TCP_KEEPALIVE`] idle on every accepted connection.
pub async fn serve(
    listener: tokio::net::TcpListener,
    service: EnvoyRls,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    let (reporter, health) = tonic_health::server::health_reporter();
    reporter
        .set_serving::<RateLimitServiceServer<EnvoyRls>>()
        .await;
    // The builder's own `tcp_keepalive` applies only to listeners it binds
    // itself: the accepted connections get it from the incoming stream.
    let incoming =
        tonic::transport::server::TcpIncoming::from(listener).with_keepalive(Some(TCP_KEEPALIVE));
    tonic::transport::Server::builder()
        .http2_keepalive_interval(Some(HTTP2_KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(HTTP2_KEEPALIVE_TIMEOUT))
        .add_service(health.max_decoding_message_size(MAX_MESSAGE_BYTES))
        .add_service(
            RateLimitServiceServer::new(service).max_decoding_message_size(MAX_MESSAGE_BYTES),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use super::*;

    fn descriptor(entries: usize) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (0..entries)
                .map(|i| Entry {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        }
    }

    #[test]
    fn the_shape_of_a_request_is_checked() {
        assert_eq!(validate(&request("d", vec![descriptor(1)])), Ok(()));
        assert_eq!(
            validate(&request("", vec![descriptor(1)])),
            Err(InvalidRequest::EmptyDomain)
        );
        assert_eq!(
            validate(&request("d", Vec::new())),
            Err(InvalidRequest::NoDescriptors)
        );
        let at_cap = vec![descriptor(MAX_ENTRIES); MAX_DESCRIPTORS];
        assert_eq!(validate(&request("d", at_cap)), Ok(()));
        assert_eq!(
            validate(&request("d", vec![descriptor(1); MAX_DESCRIPTORS + 1])),
            Err(InvalidRequest::TooManyDescriptors {
                given: MAX_DESCRIPTORS + 1
            })
        );
        assert_eq!(
            validate(&request(
                "d",
                vec![descriptor(1), descriptor(MAX_ENTRIES + 1)]
            )),
            Err(InvalidRequest::TooManyEntries {
                index: 1,
                given: MAX_ENTRIES + 1
            })
        );
        let status = Status::from(InvalidRequest::EmptyDomain);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "rate limit domain must not be empty");
    }
}
