//! Rate-limit header fields.
//!
//! Every limited response carries, as RFC 9651 Structured Field Lists with one
//! item per applied limit, named by the limit:
//!
//! - `RateLimit-Policy: "free";q=20;w=2` — `q` is the quota (the burst) and
//!   `w` the window in seconds: the time an empty limit needs to refill, i.e.
//!   `burst / rate`. A window that is not a whole number of seconds is
//!   rounded up, and `q` becomes the quota of that rounded window at the
//!   long-run rate.
//! - `RateLimit: "free";r=15;t=1` — `r` is the remaining quota and `t` the
//!   seconds until more quota is available: for a limit that refused the
//!   request, its retry-after; otherwise the time until it is fully
//!   replenished. Both are rounded up.
//!
//! A 429 adds `Retry-After` in whole seconds, rounded up and at least 1, and
//! never earlier than any refusing limit's `t`.
//!
//! Opt-in older forms carry the *most restrictive* limit (the one with the
//! least remaining): `RateLimit-Limit/-Remaining/-Reset` (drafts -04 to -06)
//! and `X-RateLimit-Limit/-Remaining/-Reset`. Both `Reset`s are delta-seconds
//! from now, not epoch timestamps.

use http::{HeaderMap, HeaderName, HeaderValue};
use sfv::{KeyRef, ListSerializer, StringRef};
use sluice_core::{LimitSpec, Nanos};
use sluice_policy::{LimitResult, Verdict};

const NS_PER_SEC: u128 = 1_000_000_000;

/// `RateLimit-Policy`.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
/// `RateLimit`.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");
/// Set when the shared store could not decide and its fallback did:
/// `local`, `allow` or `deny`.
pub const SLUICE_FALLBACK: HeaderName = HeaderName::from_static("sluice-fallback");

/// `RateLimit-Limit`, `-Remaining`, `-Reset` (drafts -04 to -06).
const LEGACY_FIELDS: [HeaderName; 3] = [
    HeaderName::from_static("ratelimit-limit"),
    HeaderName::from_static("ratelimit-remaining"),
    HeaderName::from_static("ratelimit-reset"),
];

/// `X-RateLimit-Limit`, `-Remaining`, `-Reset`.
const X_RATELIMIT_FIELDS: [HeaderName; 3] = [
    HeaderName::from_static("x-ratelimit-limit"),
    HeaderName::from_static("x-ratelimit-remaining"),
    HeaderName::from_static("x-ratelimit-reset"),
];

/// Whole seconds, rounded up.
pub fn ceil_secs(ns: Nanos) -> u64 {
    u64::try_from(u128::from(ns).div_ceil(NS_PER_SEC)).unwrap_or(u64::MAX)
}

/// The `Retry-After` value for a refusal: whole seconds, rounded up, at
/// least 1.
pub fn retry_after_secs(ns: Nanos) -> u64 {
    ceil_secs(ns).max(1)
}

/// `(q, w)` of a limit for `RateLimit-Policy`.
pub fn quota_window(spec: &LimitSpec) -> (u64, u64) {
    let window = spec.window();
    let w = ceil_secs(window).max(1);
    if u128::from(w) * NS_PER_SEC == u128::from(window) {
        return (spec.burst, w);
    }
    // The quota of `w` seconds at the long-run rate (at least the burst,
    // since `w` is at least the refill window).
    let q = u128::from(spec.rate.amount()) * u128::from(w) * NS_PER_SEC
        / u128::from(spec.rate.period());
    (u64::try_from(q).unwrap_or(u64::MAX).max(spec.burst), w)
}

/// The `t` parameter of one limit's `RateLimit` item.
pub fn seconds_until_quota(result: &LimitResult) -> u64 {
    let d = &result.decision;
    match d.retry_after {
        Some(retry) if !d.allowed => retry_after_secs(retry),
        _ => ceil_secs(d.reset_after),
    }
}

fn integer(n: u64) -> sfv::Integer {
    sfv::Integer::try_from(n).unwrap_or(sfv::Integer::MAX)
}

fn name_of(result: &LimitResult) -> &StringRef {
    // Limit names are validated at load to printable ASCII.
    StringRef::from_str(&result.name).unwrap_or(StringRef::constant("limit"))
}

/// The `RateLimit-Policy` field value, or `None` with no limits.
pub fn policy_field(results: &[LimitResult]) -> Option<String> {
    let mut ser = ListSerializer::new();
    for r in results {
        let (q, w) = quota_window(&r.spec);
        ser.bare_item(name_of(r))
            .parameter(KeyRef::constant("q"), integer(q))
            .parameter(KeyRef::constant("w"), integer(w));
    }
    ser.finish()
}

/// The `RateLimit` field value, or `None` with no limits.
pub fn ratelimit_field(results: &[LimitResult]) -> Option<String> {
    let mut ser = ListSerializer::new();
    for r in results {
        ser.bare_item(name_of(r))
            .parameter(KeyRef::constant("r"), integer(r.decision.remaining))
            .parameter(KeyRef::constant("t"), integer(seconds_until_quota(r)));
    }
    ser.finish()
}

/// Inserts a serialized Structured Field without copying it again.
fn put_field(headers: &mut HeaderMap, name: HeaderName, value: String) {
    if let Ok(v) = HeaderValue::from_maybe_shared(bytes::Bytes::from(value)) {
        headers.insert(name, v);
    }
}

fn put_number(headers: &mut HeaderMap, name: HeaderName, value: u64) {
    headers.insert(name, HeaderValue::from(value));
}

/// Adds the rate-limit fields of a verdict to `headers` (and `Retry-After`
/// when it refuses), in the header style of the config that decided it.
pub fn add_headers(verdict: &Verdict, headers: &mut HeaderMap) {
    let style = verdict.style;
    let results = &verdict.results;
    if let Some(f) = verdict.fallback {
        headers.insert(SLUICE_FALLBACK, HeaderValue::from_static(f.name()));
    }
    if let Some(v) = policy_field(results) {
        put_field(headers, RATELIMIT_POLICY, v);
    }
    if let Some(v) = ratelimit_field(results) {
        put_field(headers, RATELIMIT, v);
    }
    if !verdict.allowed {
        let retry = verdict
            .violated()
            .map(seconds_until_quota)
            .max()
            .unwrap_or(1);
        put_number(headers, http::header::RETRY_AFTER, retry.max(1));
    }
    if style.legacy || style.x_ratelimit {
        // The most restrictive limit: a refusing one, else the least remaining.
        let tightest = verdict
            .violated()
            .next()
            .or_else(|| results.iter().min_by_key(|r| r.decision.remaining));
        if let Some(r) = tightest {
            let reset = seconds_until_quota(r);
            let values = [r.decision.limit, r.decision.remaining, reset];
            let forms = [
                (style.legacy, LEGACY_FIELDS),
                (style.x_ratelimit, X_RATELIMIT_FIELDS),
            ];
            for (_, names) in forms.into_iter().filter(|(on, _)| *on) {
                for (name, value) in names.into_iter().zip(values) {
                    put_number(headers, name, value);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, Decision, Rate};
    use sluice_policy::HeadersConfig;

    fn result(name: &str, rate: &str, burst: u64, decision: Decision) -> LimitResult {
        LimitResult {
            name: name.into(),
            spec: LimitSpec {
                algorithm: AlgorithmKind::TokenBucket,
                rate: rate.parse().unwrap(),
                burst,
                nodelay: false,
            },
            decision,
            labels: sluice_policy::LimitLabels::named(name.into(), "*"),
            key: sluice_store::KeyId(0),
        }
    }

    #[test]
    fn fields_follow_draft_10() {
        let allowed = Decision {
            remaining: 15,
            reset_after: 500_000_000,
            ..Decision::full(20)
        };
        let refused = Decision {
            allowed: false,
            limit: 2,
            remaining: 0,
            reset_after: 60_000_000_000,
            retry_after: Some(29_000_000_001),
            delay: 0,
        };
        let results = vec![
            result("free", "10/s", 20, allowed),
            result("export", "2/min", 2, refused),
        ];
        assert_eq!(
            policy_field(&results).unwrap(),
            r#""free";q=20;w=2, "export";q=2;w=60"#
        );
        assert_eq!(
            ratelimit_field(&results).unwrap(),
            r#""free";r=15;t=1, "export";r=0;t=30"#
        );
        let verdict = Verdict {
            allowed: false,
            results,
            shadow: Vec::new(),
            style: HeadersConfig {
                legacy: true,
                x_ratelimit: true,
            },
            fallback: None,
        };
        let mut h = HeaderMap::new();
        add_headers(&verdict, &mut h);
        assert_eq!(h["retry-after"], "30");
        assert_eq!(h["ratelimit-limit"], "2");
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert_eq!(h["x-ratelimit-reset"], "30");
    }

    #[test]
    fn fractional_windows_round_up_with_the_matching_quota() {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(3),
            burst: 2,
            nodelay: false,
        };
        // 2 at 3/s refill in 2/3 s: advertised as 3 per 1 s.
        assert_eq!(quota_window(&spec), (3, 1));
    }

    #[test]
    fn retry_after_is_at_least_one_second_and_rounds_up() {
        assert_eq!(retry_after_secs(1), 1);
        assert_eq!(retry_after_secs(0), 1);
        assert_eq!(retry_after_secs(1_000_000_001), 2);
        assert_eq!(retry_after_secs(2_000_000_000), 2);
    }
}
