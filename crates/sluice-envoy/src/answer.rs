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
//! - A descriptor with `is_negative_hits` gives its hits back to its limit
//!   ([`Engine::refund`]) before the charges are decided: never refused,
//!   never past full, and no part of the overall code or the statistics.
//! - A descriptor on a concurrency limit (`max_in_flight`) takes its cost
//!   in slots, and one with `is_negative_hits` releases them: the same
//!   refund, never below none held. The slots an admitted request took are
//!   named in the answer's `dynamic_metadata` (see [`SLOTS_TAKEN`]), so
//!   that Envoy sends the release only for them.
//! - A descriptor marked as sent when a stream ended
//!   ([`stream_done`](crate::stream_done)) records its hits
//!   ([`Engine::debit`]): past the limit as debt, never refused, answered
//!   `OK` with its limit's state after, and no part of the overall code or
//!   the statistics.
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

use arc_swap::ArcSwap;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_core::{AlgorithmKind, Decision};
use sluice_policy::log_budget::LogBudget;
use sluice_policy::{Charge, Engine, Verdict};
use sluice_store::seam::LeaseId;

use crate::overrides::Overrides;
use crate::request::{InvalidRequest, validate};
use crate::rules::{Found, Rule, RuleKind, Rules};
use crate::stats::{Hit, RuleStats};
use crate::statuses::{headers, statuses};

mod placed;
mod slots_taken;
use placed::{Placed, cost_of};
pub use slots_taken::SLOTS_TAKEN;

/// The Rate Limit Service: the rules over an engine.
#[derive(Debug)]
pub struct EnvoyRls {
    /// Replaced whole on reload; each call reads one set from start to end.
    rules: ArcSwap<Rules>,
    engine: Arc<Engine>,
    /// Lines about unknown domains (the client names the domain): at most
    /// one a second, in bursts of five; the rest are counted.
    unknown_domain_lines: LogBudget,
    options: Options,
    overrides: Overrides,
    stats: Arc<RuleStats>,
    /// Whether some rules are in force (the health service answers
    /// `SERVING` only then).
    ready: tokio::sync::watch::Sender<bool>,
}

/// How the service answers (the `[envoy]` table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Answer exactly as envoyproxy/ratelimit does: names as the files
    /// give them, windows' ends as reset times, the reference server's
    /// headers (when `response_headers`), and every descriptor counted on
    /// its own, whatever the others' answers.
    pub compat: bool,
    /// Add headers to the answer (Sluice's, or in `compat` mode the
    /// reference server's).
    pub response_headers: bool,
    /// Fill the answer's `dynamic_metadata`.
    pub dynamic_metadata: bool,
    /// The algorithm of per-request limits.
    pub algorithm: AlgorithmKind,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            compat: false,
            response_headers: true,
            dynamic_metadata: false,
            algorithm: AlgorithmKind::FixedWindow,
        }
    }
}

/// Where a descriptor's decision is in the engine's verdict.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Place {
    /// No limit: unmatched or `unlimited`.
    None,
    /// The n-th enforced charge.
    Enforced(usize),
    /// The n-th shadowed charge.
    Shadow(usize),
    /// A refund (`is_negative_hits`): the n-th, or none when its rule has
    /// nothing to give back (unlimited, or a limit of 0).
    Refund(Option<usize>),
}

/// What the engine answered for a request's descriptors.
pub(crate) struct Counted {
    /// Where each descriptor's decision is.
    pub(crate) places: Vec<Place>,
    /// The verdict on the charges, if any.
    pub(crate) verdict: Option<Verdict>,
    /// The verdict on the refunds, if any.
    pub(crate) refunded: Option<Verdict>,
    /// Refused by limits of 0 before anything was charged
    /// ([`refused_by_zero`](crate::counting::refused_by_zero)): the
    /// charges only peeked.
    pub(crate) zero: bool,
    /// The lease its concurrency slots were taken under, if any.
    pub(crate) lease: Option<LeaseId>,
}

impl EnvoyRls {
    /// A service over compiled rules, deciding on `engine`: the rules'
    /// counters must be registered with the engine's store (see
    /// [`Rules::load`]), and descriptors are named by the engine's hasher
    /// (on a shared store, keyed by the secret every instance shares).
    pub fn new(rules: Arc<Rules>, engine: Arc<Engine>) -> Self {
        let ready = tokio::sync::watch::Sender::new(!rules.domains().is_empty());
        Self {
            ready,
            rules: ArcSwap::new(rules),
            engine,
            unknown_domain_lines: LogBudget::new(1, 5),
            options: Options::default(),
            overrides: Overrides::default(),
            stats: Arc::default(),
        }
    }

    /// The same service, answering as `options` say.
    pub fn with_options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Rules> {
        self.rules.load_full()
    }

    /// Replaces the rules (a reload): calls being decided finish on the old
    /// ones. A rule whose counter id is unchanged keeps its counts, since
    /// counters live in the engine's store.
    pub fn replace_rules(&self, rules: Arc<Rules>) {
        let any = !rules.domains().is_empty();
        self.rules.store(rules);
        self.ready.send_replace(any);
    }

    /// Whether some rules are in force, as it changes.
    pub fn ready(&self) -> tokio::sync::watch::Receiver<bool> {
        self.ready.subscribe()
    }

    /// Logs a request for a domain the rules do not have, unless too many
    /// were logged lately; the domain is cut to 64 characters.
    fn unknown_domain(&self, domain: &str) {
        let Some(left_out) = self.unknown_domain_lines.take() else {
            return;
        };
        let shown: String = domain.chars().take(64).collect();
        tracing::warn!(domain = %shown, left_out, "ShouldRateLimit for an unknown domain: allowed");
    }

    /// Decides one `ShouldRateLimit` request, once it passes [`validate`]:
    /// a request that does not is refused before any match or count.
    pub async fn decide(
        &self,
        req: &RateLimitRequest,
    ) -> Result<RateLimitResponse, InvalidRequest> {
        validate(req)?;
        // Descriptors sent when a stream ended record or release; the rest
        // decide.
        let marked = crate::stream_done::split(req);
        let (req, records, leases) = match &marked {
            Some(m) => (&m.request, &m.records[..], &m.leases[..]),
            None => (req, &[][..], &[][..]),
        };
        let rules_now = self.rules.load();
        let known = rules_now.has_domain(&req.domain);
        if !known {
            self.unknown_domain(&req.domain);
        }
        let overridden = self.overridden(req, known);
        let found = rules_now.resolve_with(&req.domain, &req.descriptors, &overridden);
        let Counted {
            places,
            verdict,
            refunded,
            zero,
            lease,
        } = self
            .counted(req, &found, &overridden, records, leases)
            .await;
        let rules: smallvec::SmallVec<[Option<&Rule>; 4]> = found
            .iter()
            .map(|f| f.as_ref().map(|f| &**f.rule))
            .collect();
        let mut decisions: smallvec::SmallVec<[Option<Decision>; 4]> = smallvec::SmallVec::new();
        let (code, statuses) = statuses(
            &rules,
            &places,
            [verdict.as_ref(), refunded.as_ref()],
            &self.options,
            &mut decisions,
        );
        self.record_stats(req, &found, &decisions, verdict.as_ref(), zero, records);
        let mut response = RateLimitResponse {
            overall_code: code as i32,
            statuses,
            ..Default::default()
        };
        response.response_headers_to_add =
            headers(verdict.as_ref(), zero, &response, &places, &self.options);
        let metadata = self
            .options
            .dynamic_metadata
            .then(|| crate::dynamic_metadata::of(req, &rules, &response.statuses));
        let answered = slots_taken::Answered {
            rules: &rules,
            places: &places,
            decisions: &decisions,
            verdict: verdict.as_ref(),
            zero,
            compat: self.options.compat,
        };
        let taken = slots_taken::slots_taken(req, &answered);
        response.dynamic_metadata = slots_taken::with_slots(metadata, taken, lease);
        Ok(response)
    }

    /// The per-request limits of a request's descriptors: one beats the
    /// config's, in a configured domain (`known`). Empty when no
    /// descriptor names one.
    fn overridden(&self, req: &RateLimitRequest, known: bool) -> Vec<Option<Arc<Rule>>> {
        if !req.descriptors.iter().any(|d| d.limit.is_some()) {
            return Vec::new();
        }
        let store = self.engine.store().as_ref();
        req.descriptors
            .iter()
            .map(|d| {
                let o = d.limit.as_ref().filter(|_| known)?;
                let rule = self.overrides.rule(o, store, self.options.algorithm);
                if rule.is_none() {
                    self.stats.ignored_override();
                }
                rule
            })
            .collect()
    }

    /// Counts the descriptors that meet a limit, on the engine: where each
    /// one's decision is in the verdict, and the verdict.
    ///
    /// By default the enforced ones are all or nothing, and shadow-mode and
    /// quota-mode ones are decided after them, each on its own, for a
    /// request they admit; a descriptor on a limit of 0 refuses the
    /// request, and nothing is charged. In `compat` mode every descriptor
    /// is decided that way (each on its own, all in one store call), as the
    /// reference server counts them.
    ///
    /// A descriptor with `is_negative_hits` gives its cost back instead
    /// (Envoy's `RateLimitDescriptor`: "the hits_addend value will be
    /// treated as negative, effectively adding to the rate limit budget"):
    /// refunds are made first, are never refused, and never take a limit
    /// past full.
    async fn counted(
        &self,
        req: &RateLimitRequest,
        found: &[Option<Found<'_>>],
        overridden: &[Option<Arc<Rule>>],
        records: &[bool],
        leases: &[Option<LeaseId>],
    ) -> Counted {
        let request_hits = if req.hits_addend == 0 {
            1
        } else {
            u64::from(req.hits_addend)
        };
        let Placed {
            places,
            charges,
            refunds,
            debits,
            zero,
            lease,
        } = self.placed(req, found, overridden, request_hits, (records, leases));
        for (d, done) in debits.iter().zip(self.engine.debit(&debits).await) {
            match done {
                Ok(debited) if debited.excess > 0 => {
                    tracing::debug!(limit = %d.limit.name, excess = debited.excess, "stream done: hits beyond the debt allowed");
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(limit = %d.limit.name, error = %e, "stream done: hits not recorded")
                }
            }
        }
        let refunded = if refunds.is_empty() {
            None
        } else {
            Some(self.refunded(&refunds).await)
        };
        let verdict = if charges.is_empty() {
            None
        } else {
            Some(self.decided(&charges).await)
        };
        Counted {
            places,
            verdict,
            refunded,
            zero,
            lease,
        }
    }

    /// The engine's verdict on the refunds; one it cannot give (a foreign
    /// counter: a bug) is logged, and the refunds show nothing.
    async fn refunded(&self, refunds: &[Charge<'_>]) -> Verdict {
        match self.engine.refund(refunds).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "ShouldRateLimit: cannot refund");
                Verdict {
                    allowed: true,
                    ..empty_refusal()
                }
            }
        }
    }

    /// Counts each descriptor that met a limit in its rule's statistics;
    /// `peeked`: the request was refused by limits of 0 before anything
    /// was charged.
    fn record_stats(
        &self,
        req: &RateLimitRequest,
        found: &[Option<Found<'_>>],
        decisions: &[Option<Decision>],
        verdict: Option<&Verdict>,
        peeked: bool,
        records: &[bool],
    ) {
        let request_hits = u64::from(req.hits_addend).max(1);
        let descriptors = req.descriptors.iter().zip(found).zip(decisions);
        for (i, ((d, f), decided)) in descriptors.enumerate() {
            // A refund is not a hit, nor hits recorded after a stream.
            let recorded = records.get(i).copied().unwrap_or(false);
            let Some(f) = f.as_ref().filter(|_| !d.is_negative_hits && !recorded) else {
                continue;
            };
            let rule = &f.rule;
            let hits = cost_of(d, request_hits);
            let limit = u64::from(rule.requests_per_unit);
            let (before, over) = match (&rule.kind, decided) {
                (RuleKind::Unlimited, _) => continue,
                (RuleKind::Zero, _) => (0, true),
                (RuleKind::Counted(_), None) => (0, false),
                (RuleKind::Counted(_), Some(d)) => {
                    let used = d.limit.saturating_sub(d.remaining);
                    // An admitted descriptor shows its state after the
                    // charge; one not charged (refused, peeked, or on a
                    // refused request, whose charges were given back)
                    // shows it before. With `compat` each counts on its
                    // own.
                    let charged = d.allowed
                        && !peeked
                        && (self.options.compat || verdict.is_some_and(|v| v.allowed));
                    let before = if charged {
                        used.saturating_sub(hits)
                    } else {
                        used
                    };
                    (before, !d.allowed)
                }
            };
            let hit = Hit {
                hits,
                limit,
                before,
                over,
                shadow: rule.shadow,
            };
            match (&f.metric_key, &rule.stats) {
                // The rule's own series, kept on the rule once found.
                (None, Some(cell)) => {
                    let c = cell.get_or_init(|| self.stats.series(&req.domain, &rule.path));
                    RuleStats::record_on(c, hit);
                }
                (key, _) => {
                    let key = key.as_deref().unwrap_or(&rule.path);
                    self.stats.record(&req.domain, key, hit);
                }
            }
        }
    }

    /// The per-rule statistics.
    pub fn stats(&self) -> &Arc<RuleStats> {
        &self.stats
    }

    /// The engine's verdict on the charges. A verdict it cannot give (a
    /// counter registered with another store: a bug) is logged, and every
    /// limited descriptor is answered over its limit.
    async fn decided(&self, charges: &[Charge<'_>]) -> Verdict {
        match self.engine.decide_charges(charges).await {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(error = %e, "ShouldRateLimit: cannot decide");
                empty_refusal()
            }
        }
    }
}

/// A refusal with no result.
fn empty_refusal() -> Verdict {
    Verdict {
        allowed: false,
        results: Default::default(),
        shadow: Default::default(),
        style: Default::default(),
        fallback: None,
    }
}
