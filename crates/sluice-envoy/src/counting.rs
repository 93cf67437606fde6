//! How each descriptor of a request counts (enforced with the others,
//! in shadow mode, as a quota, or on its own with `compat`), and whether
//! limits of 0 refuse the request before anything is charged.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_policy::Counting;

use crate::rules::{Found, Rule, RuleKind};

/// How a descriptor's charge counts. With `compat` every descriptor is
/// decided on its own, as the reference server counts them; a shadow-mode
/// rule only shadows (in quota mode too: it never takes part in the
/// quota vote, see [`statuses`](crate::statuses)).
pub(crate) fn counting(rule: &Rule, compat: bool) -> Counting {
    if rule.shadow {
        Counting::Shadow
    } else if compat {
        Counting::OnItsOwn
    } else if rule.quota {
        Counting::Quota
    } else {
        Counting::Enforced
    }
}

/// Whether a request is refused by limits of 0 before anything is
/// charged: an enforced descriptor (not a refund) meets one, or every
/// quota-mode descriptor does (each is always over, and so are they all).
pub(crate) fn refused_by_zero(req: &RateLimitRequest, found: &[Option<Found<'_>>]) -> bool {
    let rules = || {
        req.descriptors
            .iter()
            .zip(found)
            .filter(|(d, _)| !d.is_negative_hits)
            .filter_map(|(_, f)| f.as_ref())
            .filter(|f| !f.rule.shadow)
    };
    let is_zero = |f: &Found<'_>| matches!(f.rule.kind, RuleKind::Zero);
    let mut quotas = rules().filter(|f| f.rule.quota).peekable();
    let every_quota_zero = quotas.peek().is_some() && quotas.all(is_zero);
    every_quota_zero || rules().any(|f| !f.rule.quota && is_zero(f))
}
