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
//!   A concurrency limit (requests in flight, not a rate) has no window:
//!   `"exports";q=5;qu="concurrent-requests"`, the draft's quota unit.
//!   A limit counting the bytes sent says so: `qu="content-bytes"`.
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
use sfv::{ItemSerializer, StringRef};
use sluice_core::{LimitSpec, Nanos};
use sluice_policy::{LimitResult, Verdict};
use smallvec::SmallVec;

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
    ns.div_ceil(1_000_000_000)
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

/// The largest RFC 9651 Integer; larger values are sent as this.
const SF_INTEGER_MAX: u64 = 999_999_999_999_999;

/// Whether a limit name is an sf-string as it is: printable ASCII without
/// `"` or `\\`. Limit names are validated at load to such characters.
fn plain_name(name: &str) -> bool {
    name.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// Appends a limit's name as an sf-string: one copy between quotes for a
/// plain name; any other is serialized by `sfv` (with escapes), or replaced
/// by `"limit"` where it cannot be an sf-string at all.
fn push_name(out: &mut String, name: &str) {
    if plain_name(name) {
        out.push('"');
        out.push_str(name);
        out.push('"');
        return;
    }
    let item = StringRef::from_str(name).unwrap_or(StringRef::constant("limit"));
    out.push_str(&ItemSerializer::new().bare_item(item).finish());
}

/// The number of decimal digits of `n`.
fn digits(n: u64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// A Structured Field List with one item per limit, named by the limit,
/// with two integer parameters: `"name";k1=v1;k2=v2, ...`.
///
/// This is on every response's path, so it is written directly, into a
/// string of exactly its length (which `Bytes` then takes over without a
/// second allocation), rather than through a generic serializer. The tests
/// check its output against `sfv`'s.
fn list_field(
    results: &[LimitResult],
    keys: [&str; 2],
    values: impl Fn(&LimitResult) -> [u64; 2],
) -> Option<String> {
    if results.is_empty() {
        return None;
    }
    let items: SmallVec<[[u64; 2]; 4]> = results
        .iter()
        .map(|r| values(r).map(|n| n.min(SF_INTEGER_MAX)))
        .collect();
    let len: usize = results
        .iter()
        .zip(&items)
        .map(|(r, v)| {
            r.name().len()
                + 2
                + keys
                    .iter()
                    .zip(v)
                    .map(|(k, &n)| k.len() + 2 + digits(n))
                    .sum::<usize>()
        })
        .sum::<usize>()
        + 2 * (results.len() - 1);
    let mut out = String::with_capacity(len);
    let mut number = itoa::Buffer::new();
    for (i, (r, v)) in results.iter().zip(&items).enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        push_name(&mut out, r.name());
        for (key, &n) in keys.iter().zip(v) {
            out.push(';');
            out.push_str(key);
            out.push('=');
            out.push_str(number.format(n));
        }
    }
    Some(out)
}

/// `RateLimit-Policy`'s parameters: quota and window.
const POLICY_KEYS: [&str; 2] = ["q", "w"];

fn policy_params(r: &LimitResult) -> [u64; 2] {
    let (q, w) = quota_window(&r.spec);
    [q, w]
}

/// `RateLimit`'s parameters: remaining and seconds until quota.
const RATELIMIT_KEYS: [&str; 2] = ["r", "t"];

fn ratelimit_params(r: &LimitResult) -> [u64; 2] {
    [r.decision.remaining, seconds_until_quota(r)]
}

/// The `RateLimit-Policy` field value, or `None` with no limits.
pub fn policy_field(results: &[LimitResult]) -> Option<String> {
    if !results.iter().any(has_unit) {
        return list_field(results, POLICY_KEYS, policy_params);
    }
    let items: Vec<String> = results.iter().map(policy_text).collect();
    Some(items.join(", "))
}

/// Whether a limit's `RateLimit-Policy` item names a quota unit (`qu`):
/// one of requests in flight, or a cost in a unit other than requests.
fn has_unit(r: &LimitResult) -> bool {
    counts_slots(r) || r.labels.unit.is_some()
}

/// Whether a limit counts requests in flight rather than a rate.
fn counts_slots(r: &LimitResult) -> bool {
    r.spec.algorithm == sluice_core::AlgorithmKind::Concurrency
}

/// One limit's `RateLimit-Policy` item, for any limit: a concurrency
/// limit's quota of requests in flight has no window, and says its unit;
/// a limit whose cost has a unit of the draft other than requests says it
/// (`"exports";q=1000000;w=60;qu="content-bytes"`).
fn policy_text(r: &LimitResult) -> String {
    if counts_slots(r) {
        let mut out = String::new();
        push_name(&mut out, r.name());
        out.push_str(";q=");
        out.push_str(itoa::Buffer::new().format(r.spec.burst.min(SF_INTEGER_MAX)));
        out.push_str(";qu=\"concurrent-requests\"");
        return out;
    }
    let mut out =
        list_field(std::slice::from_ref(r), POLICY_KEYS, policy_params).unwrap_or_default();
    if let Some(unit) = r.labels.unit {
        out.push_str(";qu=\"");
        out.push_str(unit);
        out.push('"');
    }
    out
}

/// The `RateLimit` field value, or `None` with no limits.
pub fn ratelimit_field(results: &[LimitResult]) -> Option<String> {
    list_field(results, RATELIMIT_KEYS, ratelimit_params)
}

#[cfg(test)]
thread_local! {
    /// How many `RateLimit-Policy` items this thread had to write.
    static POLICY_WRITES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One limit's `RateLimit-Policy` item, written.
fn policy_item(r: &LimitResult) -> Option<HeaderValue> {
    #[cfg(test)]
    POLICY_WRITES.with(|n| n.set(n.get() + 1));
    if has_unit(r) {
        return field_value(policy_text(r));
    }
    list_value(std::slice::from_ref(r), POLICY_KEYS, policy_params)
}

/// The `RateLimit-Policy` value for these results: each limit's item, made
/// once and kept with the limit ([`HeaderItems`](sluice_policy::HeaderItems)),
/// joined. An item depends only on the limit's name and spec, so a response
/// under one limit sends the kept value itself (a reference count), and one
/// under several copies their items once.
fn policy_value(results: &[LimitResult]) -> Option<HeaderValue> {
    let item = |r: &LimitResult| r.labels.header_items.policy(&r.spec, || policy_item(r));
    match results {
        [] => None,
        [one] => item(one),
        many => {
            let items: SmallVec<[HeaderValue; 4]> = many.iter().map(item).collect::<Option<_>>()?;
            let len = items.iter().map(|v| v.len() + 2).sum::<usize>() - 2;
            let mut out = Vec::with_capacity(len);
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.extend_from_slice(b", ");
                }
                out.extend_from_slice(v.as_bytes());
            }
            HeaderValue::from_maybe_shared(bytes::Bytes::from(out)).ok()
        }
    }
}

/// A serialized Structured Field as a header value, without copying it
/// again.
fn field_value(value: String) -> Option<HeaderValue> {
    HeaderValue::from_maybe_shared(bytes::Bytes::from(value)).ok()
}

/// [`list_field`] as a header value: the same text, written on the stack
/// and copied once into the value's own allocation (no length to work out
/// beforehand, no intermediate list), or made by [`list_field`] when it
/// does not fit or a name needs escaping.
fn list_value(
    results: &[LimitResult],
    keys: [&str; 2],
    values: impl Fn(&LimitResult) -> [u64; 2],
) -> Option<HeaderValue> {
    let write = || {
        // The `RateLimit` value of the usual few limits.
        let mut out = sluice_core::StackText::<192>::new();
        let mut number = itoa::Buffer::new();
        for (i, r) in results.iter().enumerate() {
            let name = r.name();
            if !plain_name(name) {
                return None;
            }
            if i > 0 {
                out.push(", ")?;
            }
            out.push("\"")?;
            out.push(name)?;
            out.push("\"")?;
            for (key, n) in keys.iter().zip(values(r)) {
                out.push(";")?;
                out.push(key)?;
                out.push("=")?;
                out.push(number.format(n.min(SF_INTEGER_MAX)))?;
            }
        }
        HeaderValue::from_bytes(out.as_bytes()).ok()
    };
    if results.is_empty() {
        return None;
    }
    write().or_else(|| list_field(results, keys, &values).and_then(field_value))
}

/// The `RateLimit` value as a header value (see [`list_value`]).
fn ratelimit_value(results: &[LimitResult]) -> Option<HeaderValue> {
    list_value(results, RATELIMIT_KEYS, ratelimit_params)
}

/// The rate-limit fields of a verdict, made before the response exists:
/// the tower layer makes them when it decides, so that the verdict itself
/// can go on to the handler, and adds them to the response when it comes.
#[derive(Debug, Clone, Default)]
pub struct Fields {
    /// `RateLimit-Policy`.
    policy: Option<HeaderValue>,
    /// `RateLimit`.
    ratelimit: Option<HeaderValue>,
    /// The others, rarer (a fallback's, `Retry-After`, the older forms).
    more: Vec<(HeaderName, HeaderValue)>,
}

impl Fields {
    /// The fields of a verdict (and `Retry-After` when it refuses), in the
    /// header style of the config that decided it: `None` when it has none
    /// (an admitted request under `on_admitted = false`, decided without a
    /// fallback), so that an adapter carries nothing to its response.
    #[inline]
    pub fn of(verdict: &Verdict) -> Option<Self> {
        if verdict.allowed && !verdict.style.on_admitted && verdict.fallback.is_none() {
            return None;
        }
        Some(Self::made(verdict))
    }

    /// [`of`](Self::of) a verdict that has fields.
    fn made(verdict: &Verdict) -> Self {
        let style = verdict.style;
        let results = &verdict.results;
        let mut more = Vec::new();
        if let Some(f) = verdict.fallback {
            more.push((SLUICE_FALLBACK, HeaderValue::from_static(f.name())));
        }
        if verdict.allowed && !style.on_admitted {
            return Self {
                more,
                ..Self::default()
            };
        }
        if !verdict.allowed {
            let retry = verdict
                .violated()
                .map(seconds_until_quota)
                .max()
                .unwrap_or(1);
            more.push((http::header::RETRY_AFTER, HeaderValue::from(retry.max(1))));
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
                        more.push((name, HeaderValue::from(value)));
                    }
                }
            }
        }
        Self {
            policy: policy_value(results),
            ratelimit: ratelimit_value(results),
            more,
        }
    }

    /// Adds the fields to `headers`, replacing any of the same names.
    pub fn apply(self, headers: &mut HeaderMap) {
        if let Some(v) = self.policy {
            headers.insert(RATELIMIT_POLICY, v);
        }
        if let Some(v) = self.ratelimit {
            headers.insert(RATELIMIT, v);
        }
        for (name, value) in self.more {
            headers.insert(name, value);
        }
    }
}

/// Adds the rate-limit fields of a verdict to `headers` (and `Retry-After`
/// when it refuses), in the header style of the config that decided it.
pub fn add_headers(verdict: &Verdict, headers: &mut HeaderMap) {
    if let Some(fields) = Fields::of(verdict) {
        fields.apply(headers);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::{AlgorithmKind, Decision, Rate};
    use sluice_policy::HeadersConfig;
    use sluice_store::seam::Fallback;

    fn result(name: &str, rate: &str, burst: u64, decision: Decision) -> LimitResult {
        LimitResult {
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

    /// `export` (2/min, burst 2) refusing: retry in 29 s and a bit.
    fn export_refused() -> Decision {
        Decision {
            allowed: false,
            limit: 2,
            remaining: 0,
            reset_after: 60_000_000_000,
            retry_after: Some(29_000_000_001),
            delay: 0,
        }
    }

    #[test]
    fn fields_follow_draft_10() {
        let allowed = Decision {
            remaining: 15,
            reset_after: 500_000_000,
            ..Decision::full(20)
        };
        let refused = export_refused();
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
            results: results.into(),
            shadow: Default::default(),
            style: HeadersConfig {
                legacy: true,
                x_ratelimit: true,
                on_admitted: true,
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
    fn without_on_admitted_only_refusals_carry_the_fields() {
        let refused = export_refused();
        let verdict = |allowed: bool, fallback| Verdict {
            allowed,
            results: vec![result(
                "free",
                "2/min",
                2,
                if allowed { Decision::full(2) } else { refused },
            )]
            .into(),
            shadow: Default::default(),
            style: HeadersConfig {
                x_ratelimit: true,
                on_admitted: false,
                ..HeadersConfig::default()
            },
            fallback,
        };
        assert!(Fields::of(&verdict(true, None)).is_none());
        let mut h = HeaderMap::new();
        add_headers(&verdict(true, None), &mut h);
        assert!(h.is_empty(), "{h:?}");
        add_headers(&verdict(true, Some(Fallback::Local)), &mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert_eq!(h[SLUICE_FALLBACK], Fallback::Local.name());
        let mut h = HeaderMap::new();
        add_headers(&verdict(false, None), &mut h);
        assert_eq!(h["retry-after"], "30");
        assert_eq!(h["ratelimit"], r#""free";r=0;t=30"#);
        assert_eq!(h["x-ratelimit-remaining"], "0");
        assert!(h.contains_key("ratelimit-policy"));
    }

    /// What `sfv`'s own serializer makes of the same list.
    fn sfv_list(items: &[(&str, [(&str, u64); 2])]) -> Option<String> {
        let mut ser = sfv::ListSerializer::new();
        for (name, params) in items {
            let mut item = ser.bare_item(StringRef::from_str(name).unwrap());
            for (k, v) in params {
                let n = sfv::Integer::try_from((*v).min(SF_INTEGER_MAX)).unwrap();
                item = item.parameter(sfv::KeyRef::from_str(k).unwrap(), n);
            }
        }
        ser.finish()
    }

    #[test]
    fn fields_are_what_sfv_serializes() {
        let names = [
            "free",
            "a.b:c/d-e_f",
            "with space",
            r#"q"uote"#,
            r"back\slash",
            "~",
        ];
        let numbers = [
            0,
            1,
            9,
            10,
            12_345,
            SF_INTEGER_MAX,
            SF_INTEGER_MAX + 1,
            u64::MAX,
        ];
        for (i, name) in names.iter().enumerate() {
            for (j, &n) in numbers.iter().enumerate() {
                let m = numbers[(i + j + 1) % numbers.len()];
                let decision = Decision {
                    remaining: n,
                    reset_after: m.saturating_mul(1_000_000_000),
                    ..Decision::full(n)
                };
                let results = vec![
                    result(name, "10/s", 20, decision),
                    result("second", "1/min", 3, decision),
                ];
                let t = ceil_secs(m.saturating_mul(1_000_000_000));
                let want = sfv_list(&[
                    (name, [("r", n), ("t", t)]),
                    ("second", [("r", n), ("t", t)]),
                ]);
                let field = ratelimit_field(&results);
                assert_eq!(field, want, "{name} {n} {m}");
                let value = ratelimit_value(&results).map(|v| v.to_str().unwrap().to_owned());
                assert_eq!(value, want, "the header value, {name} {n} {m}");
                // Sized exactly, so that `Bytes` takes it without copying.
                let field = field.unwrap();
                if plain_name(name) {
                    assert_eq!(field.len(), field.capacity(), "{field}");
                }
                let want = sfv_list(&[
                    (name, [("q", 20), ("w", 2)]),
                    ("second", [("q", 3), ("w", 180)]),
                ]);
                assert_eq!(policy_field(&results), want, "{name}");
            }
        }
        assert_eq!(ratelimit_field(&[]), None);
        assert_eq!(ratelimit_value(&[]), None);
        assert_eq!(policy_field(&[]), None);
    }

    #[test]
    fn a_ratelimit_value_too_long_for_the_stack_is_still_whole() {
        let long = "l".repeat(64);
        let results: Vec<_> = (0..8)
            .map(|_| result(&long, "10/s", 20, Decision::full(20)))
            .collect();
        let value = ratelimit_value(&results).unwrap();
        assert!(value.len() > 192, "the test needs the fallback path");
        assert_eq!(value.to_str().unwrap(), ratelimit_field(&results).unwrap());
    }

    #[test]
    fn the_reused_policy_value_always_describes_the_limits_applied() {
        let a = vec![result("free", "10/s", 20, Decision::full(20))];
        let same_limit = vec![LimitResult {
            decision: Decision::full(3),
            ..a[0].clone()
        }];
        let other_spec = vec![LimitResult {
            spec: LimitSpec {
                burst: 40,
                ..a[0].spec
            },
            ..a[0].clone()
        }];
        // Another limit of the same name (as after a reload): a new `Arc`.
        let reloaded = vec![result("free", "10/min", 20, Decision::full(20))];
        let two = vec![
            a[0].clone(),
            result("export", "2/min", 2, Decision::full(2)),
        ];
        for results in [&a, &same_limit, &other_spec, &reloaded, &two, &a, &reloaded] {
            let value = policy_value(results).unwrap();
            assert_eq!(value.to_str().unwrap(), policy_field(results).unwrap());
        }
        assert_eq!(policy_value(&[]), None);
    }

    #[test]
    fn alternating_sets_of_limits_reuse_each_limits_kept_item() {
        let free = vec![result("free", "10/s", 20, Decision::full(20))];
        let pro = vec![result("pro", "100/s", 300, Decision::full(300))];
        let export = vec![
            pro[0].clone(),
            result("export", "2/min", 2, Decision::full(2)),
        ];
        let writes = || POLICY_WRITES.with(std::cell::Cell::get);
        let sets = [&free, &pro, &export];
        for results in sets {
            policy_value(results).unwrap();
        }
        let warm = writes();
        for _ in 0..3 {
            for results in sets {
                let value = policy_value(results).unwrap();
                assert_eq!(value.to_str().unwrap(), policy_field(results).unwrap());
            }
        }
        assert_eq!(
            writes(),
            warm,
            "interleaved plans reuse the items kept with their limits"
        );
        // Many limits, each seen twice: always right.
        let many: Vec<_> = (0..8)
            .map(|n| vec![result(&format!("l{n}"), "1/s", 1, Decision::full(1))])
            .collect();
        for results in many.iter().chain(&many) {
            let value = policy_value(results).unwrap();
            assert_eq!(value.to_str().unwrap(), policy_field(results).unwrap());
        }
    }

    #[test]
    fn a_name_that_cannot_be_an_sf_string_is_replaced() {
        let results = vec![result("tab\there", "10/s", 20, Decision::full(20))];
        assert_eq!(ratelimit_field(&results).unwrap(), r#""limit";r=20;t=0"#);
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
