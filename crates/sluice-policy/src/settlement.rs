//! Costs settled after the response: a limit with a `settle` rule charges
//! an **estimate** when the request is admitted, and, once the response is
//! known, the difference between the **actual** cost and the estimate is
//! charged (into debt, up to `max_debt`) or given back (never above full).
//!
//! This module holds the compiled rule and the arithmetic of "what did this
//! request actually cost": where the actual cost is read, how the status
//! changes it, and how an estimate is read from the request. The engine
//! ([`Engine::settle`](crate::Engine::settle)) applies it to the store.
//!
//! ```
//! use sluice_policy::settlement::{Observed, SettleFrom, Settlement, StatusSet};
//! let rule = Settlement {
//!     from: SettleFrom::Reported,
//!     refund_status: StatusSet::parse(&["5xx"]).unwrap(),
//!     ..Settlement::default()
//! };
//! // The handler reported 40; the estimate charged was 100.
//! let seen = Observed { status: Some(200), reported: Some(40), ..Observed::default() };
//! assert_eq!(rule.actual(100, &seen), 40);
//! // A 503 is given back whole.
//! let failed = Observed { status: Some(503), reported: Some(40), ..Observed::default() };
//! assert_eq!(rule.actual(100, &failed), 0);
//! // Nothing reported: the estimate stands.
//! assert_eq!(rule.actual(100, &Observed::default()), 100);
//! ```

use http::{HeaderMap, HeaderName};
use std::sync::Arc;

use crate::policy::RequestInfo;
use crate::slot_wait::SlotWait;

/// The most a cost read from a header or a response may be. Larger
/// numbers are not costs a client or upstream could mean: they are
/// clamped here (and a debit still bounds what is charged by `max_debt`).
pub const MAX_COST: u64 = 1 << 53;

/// Where a settled request's actual cost comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SettleFrom {
    /// What the application reports: a response extension in the tower
    /// layer, the `cost` of `POST /v1/settle`, Envoy's stream-done
    /// `hits_addend`.
    #[default]
    Reported,
    /// A response header of the upstream (proxy mode), e.g.
    /// `X-Tokens-Used`.
    Header(HeaderName),
    /// A response trailer of the upstream (proxy mode).
    Trailer(HeaderName),
    /// The bytes of the response body sent to the client.
    BodyBytes,
    /// A field of the `usage` an OpenAI-style response reports (JSON body
    /// or event stream).
    Usage(UsageField),
    /// The estimate itself: only the status rules change it.
    Estimate,
    /// A concurrency slot: given back whole when the request ends,
    /// whatever its status (the actual cost is 0).
    Slot,
}

impl SettleFrom {
    /// The draft's quota unit of the cost read here, where it is not
    /// requests: `content-bytes` for the bytes sent; `None` otherwise (the
    /// draft has no unit for tokens, or for a number an upstream reports).
    pub fn quota_unit(&self) -> Option<&'static str> {
        matches!(self, Self::BodyBytes).then_some("content-bytes")
    }
}

/// A field of an OpenAI-style `usage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageField {
    /// `total_tokens` (or input + output).
    Total,
    /// `prompt_tokens` (or `input_tokens`).
    Prompt,
    /// `completion_tokens` (or `output_tokens`).
    Completion,
}

/// The token counts a response reported.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Prompt (input) tokens.
    pub prompt: u64,
    /// Completion (output) tokens.
    pub completion: u64,
    /// All tokens.
    pub total: u64,
}

impl TokenUsage {
    fn field(&self, f: UsageField) -> u64 {
        match f {
            UsageField::Total => self.total,
            UsageField::Prompt => self.prompt,
            UsageField::Completion => self.completion,
        }
    }
}

/// A set of HTTP statuses (100 to 599), as `"5xx"` classes and single
/// codes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatusSet([u64; 10]);

impl StatusSet {
    /// The set of `items`: each a class (`"4xx"`) or a code (`"429"`).
    /// `None` when empty; an error names the item that is neither.
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Option<Self>, String> {
        let mut set = Self::default();
        for item in items {
            let item = item.as_ref().trim();
            let b = item.as_bytes();
            if b.len() == 3 && (b'1'..=b'5').contains(&b[0]) && b[1..].eq_ignore_ascii_case(b"xx") {
                let base = u16::from(b[0] - b'0') * 100;
                (base..base + 100).for_each(|s| set.insert(s));
            } else {
                match item.parse::<u16>() {
                    Ok(code) if (100..=599).contains(&code) => set.insert(code),
                    _ => {
                        return Err(format!(
                            "`{item}` is not a status: use a code from 100 to 599, or a class such as \"5xx\""
                        ));
                    }
                }
            }
        }
        Ok((set != Self::default()).then_some(set))
    }

    fn insert(&mut self, status: u16) {
        let i = usize::from(status);
        self.0[i / 64] |= 1 << (i % 64);
    }

    /// Whether `status` is in the set.
    pub fn contains(&self, status: u16) -> bool {
        let i = usize::from(status);
        i < 640 && self.0[i / 64] & (1 << (i % 64)) != 0
    }
}

/// Where a request names its estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EstimateFrom {
    /// A request header (`header:<Name>`).
    Header(HeaderName),
    /// A whole-number field at the top level of the request's JSON body
    /// (`json:<field>`), as the adapter read it
    /// ([`BodyFields`](crate::request_body::BodyFields)).
    BodyField(Box<str>),
}

/// A limit's `settle` rule, compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settlement {
    /// Where the actual cost is read.
    pub from: SettleFrom,
    /// Where a request names its estimate, over the limit's `cost`: the
    /// first of these that the request has as a whole number.
    pub estimate: Vec<EstimateFrom>,
    /// The most debt a settlement may leave, in units of cost beyond
    /// empty; what would pass it is excess, reported and not charged.
    pub max_debt: u64,
    /// Window algorithms only: debt is dropped at the end of its window
    /// (the peers' way) instead of carried.
    pub forgive: bool,
    /// Only these statuses are charged: any other settles at 0.
    pub charge_status: Option<StatusSet>,
    /// These statuses settle at 0: the request's cost is given back.
    pub refund_status: Option<StatusSet>,
    /// A concurrency limit with `on_limit = "delay"`: where its requests
    /// wait for a slot on this instance.
    pub wait: Option<Arc<SlotWait>>,
}

/// A rule with the defaults: the application reports the cost, at most one
/// burst of debt (set by the compiler), debt carried.
impl Default for Settlement {
    fn default() -> Self {
        Self {
            from: SettleFrom::Reported,
            estimate: Vec::new(),
            max_debt: 0,
            forgive: false,
            charge_status: None,
            refund_status: None,
            wait: None,
        }
    }
}

/// What an adapter saw of a finished request: each field `None` where it
/// saw nothing of the kind.
#[derive(Debug, Clone, Copy, Default)]
pub struct Observed<'a> {
    /// The response status.
    pub status: Option<u16>,
    /// The response headers.
    pub headers: Option<&'a HeaderMap>,
    /// The response trailers.
    pub trailers: Option<&'a HeaderMap>,
    /// Bytes of the response body sent to the client.
    pub body_bytes: Option<u64>,
    /// The usage the response reported.
    pub usage: Option<TokenUsage>,
    /// The cost the application reported.
    pub reported: Option<u64>,
}

impl Settlement {
    /// The rule of a concurrency limit: its slot is given back whole when
    /// the request ends.
    pub fn slot() -> Self {
        Self {
            from: SettleFrom::Slot,
            ..Self::default()
        }
    }

    /// Whether this is a concurrency limit's slot.
    pub fn is_slot(&self) -> bool {
        self.from == SettleFrom::Slot
    }

    /// The actual cost of a request charged `estimate`, from what was
    /// observed. A status in `refund_status`, or outside `charge_status`,
    /// settles at 0; otherwise the cost is read from its source, and where
    /// the source said nothing (no usage in the stream, no header, a value
    /// that is not a number), the estimate stands. At most [`MAX_COST`].
    pub fn actual(&self, estimate: u64, seen: &Observed<'_>) -> u64 {
        if self.is_slot() {
            return 0;
        }
        if let Some(status) = seen.status {
            let refunded = self.refund_status.is_some_and(|s| s.contains(status));
            let uncharged = self.charge_status.is_some_and(|s| !s.contains(status));
            if refunded || uncharged {
                return 0;
            }
        }
        let read = match &self.from {
            SettleFrom::Reported => seen.reported,
            SettleFrom::Header(name) => seen.headers.and_then(|h| cost_in(h, name)),
            SettleFrom::Trailer(name) => seen.trailers.and_then(|h| cost_in(h, name)),
            SettleFrom::BodyBytes => seen.body_bytes,
            SettleFrom::Usage(field) => seen.usage.map(|u| u.field(*field)),
            SettleFrom::Estimate | SettleFrom::Slot => None,
        };
        read.unwrap_or(estimate).min(MAX_COST)
    }

    /// The estimate a request names where the rule's `estimate` says (a
    /// header, or a field of its JSON body), within `1..=burst`; `None`
    /// without a usable one (absent, doubled, negative, not a whole
    /// number): the limit's own cost then stands.
    pub fn estimate_in(&self, req: &RequestInfo<'_>, burst: u64) -> Option<u64> {
        self.estimate
            .iter()
            .find_map(|from| match from {
                EstimateFrom::Header(name) => cost_in(req.headers, name),
                EstimateFrom::BodyField(field) => req.body.and_then(|b| b.whole(field)),
            })
            .map(|c| c.min(MAX_COST).clamp(1, burst.max(1)))
    }

    /// Whether the rule reads a field of the request's JSON body.
    pub fn reads_request_body(&self) -> bool {
        self.estimate
            .iter()
            .any(|e| matches!(e, EstimateFrom::BodyField(_)))
    }

    /// The field whose value was not a cost, when the rule reads a header
    /// or trailer that is there but holds no whole number (negative, a
    /// fraction, text, or two fields): it was ignored.
    pub fn malformed<'s>(&'s self, seen: &Observed<'_>) -> Option<&'s HeaderName> {
        let (name, fields) = match &self.from {
            SettleFrom::Header(name) => (name, seen.headers?),
            SettleFrom::Trailer(name) => (name, seen.trailers?),
            _ => return None,
        };
        (fields.contains_key(name) && cost_in(fields, name).is_none()).then_some(name)
    }

    /// An estimate header the request has that holds no whole number: it
    /// was ignored.
    pub fn malformed_estimate(&self, headers: &HeaderMap) -> Option<&HeaderName> {
        self.estimate.iter().find_map(|from| match from {
            EstimateFrom::Header(name) => {
                (headers.contains_key(name) && cost_in(headers, name).is_none()).then_some(name)
            }
            EstimateFrom::BodyField(_) => None,
        })
    }

    /// Whether the rule reads the response body (so a proxy scans it).
    pub fn reads_body(&self) -> bool {
        matches!(self.from, SettleFrom::BodyBytes | SettleFrom::Usage(_))
    }
}

/// A cost in a header: one field, a whole decimal number (at most
/// [`MAX_COST`]: larger is clamped). Anything else, a list or two fields
/// included, is no cost.
pub fn cost_in(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let mut values = headers.get_all(name).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let text = value.to_str().ok()?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // All digits: only too many of them fail to parse.
    Some(text.parse::<u64>().map_or(MAX_COST, |n| n.min(MAX_COST)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        h
    }

    #[test]
    fn costs_in_headers_are_whole_numbers_in_one_field() {
        let name = HeaderName::from_static("x-cost");
        let at = |v: &[(&str, &str)]| cost_in(&headers(v), &name);
        assert_eq!(at(&[("x-cost", "42")]), Some(42));
        assert_eq!(at(&[("x-cost", " 7 ")]), Some(7));
        assert_eq!(at(&[("x-cost", "-5")]), None);
        assert_eq!(at(&[("x-cost", "1.5")]), None);
        assert_eq!(at(&[("x-cost", "1e9")]), None);
        assert_eq!(at(&[("x-cost", "")]), None);
        assert_eq!(at(&[("x-cost", "1, 2")]), None);
        assert_eq!(at(&[("x-cost", "1"), ("x-cost", "2")]), None);
        assert_eq!(at(&[("x-cost", "99999999999999999999999")]), Some(MAX_COST));
        assert_eq!(at(&[]), None);
    }

    fn request<'a>(
        headers: &'a HeaderMap,
        body: Option<&'a crate::request_body::BodyFields>,
    ) -> RequestInfo<'a> {
        RequestInfo {
            method: &http::Method::POST,
            path: "/v1/chat/completions",
            headers,
            peer: None,
            cost: None,
            body,
        }
    }

    #[test]
    fn an_estimate_is_kept_within_the_burst_and_never_zero() {
        let rule = Settlement {
            estimate: vec![EstimateFrom::Header(HeaderName::from_static("x-estimate"))],
            ..Settlement::default()
        };
        let at = |v: &str| {
            let h = headers(&[("x-estimate", v)]);
            rule.estimate_in(&request(&h, None), 100)
        };
        assert_eq!(at("40"), Some(40));
        assert_eq!(at("0"), Some(1));
        assert_eq!(at("100000"), Some(100));
        assert_eq!(at("-1"), None);
        let none = HeaderMap::new();
        assert_eq!(
            Settlement::default().estimate_in(&request(&none, None), 100),
            None
        );
    }

    #[test]
    fn the_first_estimate_the_request_has_stands() {
        let rule = Settlement {
            estimate: vec![
                EstimateFrom::BodyField("max_completion_tokens".into()),
                EstimateFrom::BodyField("max_tokens".into()),
                EstimateFrom::Header(HeaderName::from_static("x-estimate")),
            ],
            ..Settlement::default()
        };
        assert!(rule.reads_request_body());
        let mut body = crate::request_body::BodyFields::new();
        body.push_whole("max_tokens", 300);
        let h = headers(&[("x-estimate", "7")]);
        assert_eq!(rule.estimate_in(&request(&h, Some(&body)), 1000), Some(300));
        body.push_whole("max_completion_tokens", 5000);
        assert_eq!(
            rule.estimate_in(&request(&h, Some(&body)), 1000),
            Some(1000),
            "within the burst"
        );
        assert_eq!(rule.estimate_in(&request(&h, None), 1000), Some(7));
    }

    #[test]
    fn status_rules_settle_at_zero() {
        let only_failures = Settlement {
            from: SettleFrom::Estimate,
            charge_status: StatusSet::parse(&["401", "5xx"]).unwrap(),
            ..Settlement::default()
        };
        let at = |s| {
            only_failures.actual(
                1,
                &Observed {
                    status: Some(s),
                    ..Observed::default()
                },
            )
        };
        assert_eq!(
            (at(200), at(401), at(404), at(500), at(599)),
            (0, 1, 0, 1, 1)
        );
        assert_eq!(StatusSet::parse::<&str>(&[]), Ok(None));
        assert!(StatusSet::parse(&["6xx"]).is_err());
        assert!(StatusSet::parse(&["99"]).is_err());
        assert!(StatusSet::parse(&["5XX"]).unwrap().unwrap().contains(503));
    }

    #[test]
    fn each_source_is_read_and_a_silent_one_keeps_the_estimate() {
        let usage = TokenUsage {
            prompt: 10,
            completion: 30,
            total: 40,
        };
        let h = headers(&[("x-used", "12")]);
        let seen = Observed {
            status: Some(200),
            headers: Some(&h),
            trailers: None,
            body_bytes: Some(2048),
            usage: Some(usage),
            reported: Some(5),
        };
        let from = |from| {
            Settlement {
                from,
                ..Settlement::default()
            }
            .actual(99, &seen)
        };
        assert_eq!(from(SettleFrom::Reported), 5);
        assert_eq!(
            from(SettleFrom::Header(HeaderName::from_static("x-used"))),
            12
        );
        assert_eq!(
            from(SettleFrom::Trailer(HeaderName::from_static("x-used"))),
            99
        );
        assert_eq!(from(SettleFrom::BodyBytes), 2048);
        assert_eq!(from(SettleFrom::Usage(UsageField::Total)), 40);
        assert_eq!(from(SettleFrom::Usage(UsageField::Prompt)), 10);
        assert_eq!(from(SettleFrom::Usage(UsageField::Completion)), 30);
        assert_eq!(from(SettleFrom::Estimate), 99);
    }
}
