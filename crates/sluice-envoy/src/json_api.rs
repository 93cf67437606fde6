//! `ShouldRateLimit` in JSON, as the reference server's HTTP `/json`
//! endpoint takes and answers it: the request and the response in the
//! proto3 JSON mapping (what Go's `protojson` reads and writes).
//!
//! Reading follows the mapping's rules: a field may be named by its JSON
//! name (`hitsAddend`) or its proto name (`hits_addend`); an integer may be
//! a JSON number or a string holding one; an enum is its name or its
//! number; `null` is the field's default; a field the message does not have
//! is an error. Writing gives JSON names, leaves out fields at their
//! default (zero, empty), writes enums by name, a `uint64` as a string, a
//! duration as `"1.500s"`, and bytes in base64.

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::google::protobuf::{self as pb, value::Kind};
use serde_json::{Map, Value, json};

/// Why a JSON body is not a `RateLimitRequest`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct JsonError {
    /// Where in the document: `descriptors[0].entries[1].key`, say.
    pub path: String,
    /// What is wrong there.
    pub message: String,
}

fn error(path: &str, message: impl Into<String>) -> JsonError {
    JsonError {
        path: if path.is_empty() {
            "the request".into()
        } else {
            path.into()
        },
        message: message.into(),
    }
}

/// Reads a `RateLimitRequest` from its proto3 JSON form.
///
/// ```
/// let req = sluice_envoy::json_api::request_from_json(
///     br#"{"domain": "dummy", "descriptors": [{"entries": [{"key": "perday"}]}], "hitsAddend": "2"}"#,
/// ).unwrap();
/// assert_eq!(req.domain, "dummy");
/// assert_eq!(req.descriptors[0].entries[0].key, "perday");
/// assert_eq!(req.hits_addend, 2);
/// ```
pub fn request_from_json(body: &[u8]) -> Result<RateLimitRequest, JsonError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| error("", format!("not a JSON document: {e}")))?;
    let mut req = RateLimitRequest::default();
    for (name, v) in object(&value, "")? {
        match name.as_str() {
            "domain" => req.domain = string(v, "domain")?,
            "descriptors" => {
                for (i, d) in array(v, "descriptors")?.iter().enumerate() {
                    req.descriptors
                        .push(descriptor(d, &format!("descriptors[{i}]"))?);
                }
            }
            "hitsAddend" | "hits_addend" => req.hits_addend = uint32(v, "hitsAddend")?,
            other => return Err(error(other, "not a field of RateLimitRequest")),
        }
    }
    Ok(req)
}

fn descriptor(value: &Value, path: &str) -> Result<RateLimitDescriptor, JsonError> {
    let mut d = RateLimitDescriptor::default();
    for (name, v) in object(value, path)? {
        let at = format!("{path}.{name}");
        match name.as_str() {
            "entries" => {
                for (i, e) in array(v, &at)?.iter().enumerate() {
                    d.entries.push(entry(e, &format!("{at}[{i}]"))?);
                }
            }
            "limit" if !v.is_null() => d.limit = Some(limit_override(v, &at)?),
            "limit" => {}
            "hitsAddend" | "hits_addend" if !v.is_null() => {
                d.hits_addend = Some(pb::UInt64Value {
                    value: uint64(v, &at)?,
                });
            }
            "hitsAddend" | "hits_addend" => {}
            "isNegativeHits" | "is_negative_hits" => d.is_negative_hits = boolean(v, &at)?,
            _ => return Err(error(&at, "not a field of RateLimitDescriptor")),
        }
    }
    Ok(d)
}

fn entry(value: &Value, path: &str) -> Result<Entry, JsonError> {
    let mut e = Entry::default();
    for (name, v) in object(value, path)? {
        let at = format!("{path}.{name}");
        match name.as_str() {
            "key" => e.key = string(v, &at)?,
            "value" => e.value = string(v, &at)?,
            _ => return Err(error(&at, "not a field of Entry")),
        }
    }
    Ok(e)
}

fn limit_override(value: &Value, path: &str) -> Result<RateLimitOverride, JsonError> {
    let mut l = RateLimitOverride::default();
    for (name, v) in object(value, path)? {
        let at = format!("{path}.{name}");
        match name.as_str() {
            "requestsPerUnit" | "requests_per_unit" => l.requests_per_unit = uint32(v, &at)?,
            "unit" => {
                l.unit = match v {
                    Value::Null => 0,
                    Value::String(s) => RateLimitUnit::from_str_name(s)
                        .ok_or_else(|| error(&at, format!("`{s}` is not a RateLimitUnit")))?
                        as i32,
                    other => i32::try_from(integer(other, &at)?)
                        .map_err(|_| error(&at, "out of range for an enum"))?,
                };
            }
            _ => return Err(error(&at, "not a field of RateLimitOverride")),
        }
    }
    Ok(l)
}

/// An object's members; `null` is an empty one.
fn object<'a>(value: &'a Value, path: &str) -> Result<Vec<(&'a String, &'a Value)>, JsonError> {
    match value {
        Value::Object(map) => Ok(map.iter().collect()),
        Value::Null => Ok(Vec::new()),
        _ => Err(error(path, "expected an object")),
    }
}

fn array<'a>(value: &'a Value, path: &str) -> Result<&'a [Value], JsonError> {
    match value {
        Value::Array(items) => Ok(items),
        Value::Null => Ok(&[]),
        _ => Err(error(path, "expected an array")),
    }
}

fn string(value: &Value, path: &str) -> Result<String, JsonError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        _ => Err(error(path, "expected a string")),
    }
}

fn boolean(value: &Value, path: &str) -> Result<bool, JsonError> {
    match value {
        Value::Bool(b) => Ok(*b),
        Value::Null => Ok(false),
        _ => Err(error(path, "expected true or false")),
    }
}

/// A whole number, from a JSON number (an integral one, `2.0` or `2e3`
/// too) or a string holding one.
fn integer(value: &Value, path: &str) -> Result<i128, JsonError> {
    let not = || error(path, "expected a whole number");
    match value {
        Value::Null => Ok(0),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                return Ok(i128::from(i));
            }
            if let Some(u) = n.as_u64() {
                return Ok(i128::from(u));
            }
            let f = n.as_f64().ok_or_else(not)?;
            // Exact in a double below 2^64, as the mapping allows.
            if f.fract() == 0.0 && f.abs() < 1.8e19 {
                #[allow(clippy::cast_possible_truncation)]
                return Ok(f as i128);
            }
            Err(not())
        }
        Value::String(s) => s.trim().parse::<i128>().map_err(|_| not()),
        _ => Err(not()),
    }
}

fn uint32(value: &Value, path: &str) -> Result<u32, JsonError> {
    u32::try_from(integer(value, path)?).map_err(|_| error(path, "out of range for a uint32"))
}

fn uint64(value: &Value, path: &str) -> Result<u64, JsonError> {
    u64::try_from(integer(value, path)?).map_err(|_| error(path, "out of range for a uint64"))
}

/// A `RateLimitResponse` in its proto3 JSON form.
///
/// ```
/// use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
/// let answer = RateLimitResponse { overall_code: 2, ..Default::default() };
/// assert_eq!(
///     sluice_envoy::json_api::response_to_json(&answer),
///     serde_json::json!({"overallCode": "OVER_LIMIT"})
/// );
/// ```
pub fn response_to_json(r: &RateLimitResponse) -> Value {
    let mut out = Map::new();
    put_enum(&mut out, "overallCode", r.overall_code, |c| {
        Code::try_from(c).ok().map(|c| c.as_str_name())
    });
    if !r.statuses.is_empty() {
        out.insert(
            "statuses".into(),
            r.statuses.iter().map(status_to_json).collect(),
        );
    }
    if !r.response_headers_to_add.is_empty() {
        out.insert(
            "responseHeadersToAdd".into(),
            r.response_headers_to_add
                .iter()
                .map(header_to_json)
                .collect(),
        );
    }
    if !r.request_headers_to_add.is_empty() {
        out.insert(
            "requestHeadersToAdd".into(),
            r.request_headers_to_add
                .iter()
                .map(header_to_json)
                .collect(),
        );
    }
    if !r.raw_body.is_empty() {
        out.insert("rawBody".into(), Value::String(base64(&r.raw_body)));
    }
    if let Some(s) = &r.dynamic_metadata {
        out.insert("dynamicMetadata".into(), struct_to_json(s));
    }
    Value::Object(out)
}

fn status_to_json(s: &DescriptorStatus) -> Value {
    let mut out = Map::new();
    put_enum(&mut out, "code", s.code, |c| {
        Code::try_from(c).ok().map(|c| c.as_str_name())
    });
    if let Some(l) = &s.current_limit {
        let mut limit = Map::new();
        if !l.name.is_empty() {
            limit.insert("name".into(), Value::String(l.name.clone()));
        }
        if l.requests_per_unit != 0 {
            limit.insert("requestsPerUnit".into(), json!(l.requests_per_unit));
        }
        put_enum(&mut limit, "unit", l.unit, |u| {
            Unit::try_from(u).ok().map(|u| u.as_str_name())
        });
        out.insert("currentLimit".into(), Value::Object(limit));
    }
    if s.limit_remaining != 0 {
        out.insert("limitRemaining".into(), json!(s.limit_remaining));
    }
    if let Some(d) = &s.duration_until_reset {
        out.insert(
            "durationUntilReset".into(),
            Value::String(duration(d.seconds, d.nanos)),
        );
    }
    Value::Object(out)
}

fn header_to_json(h: &HeaderValue) -> Value {
    let mut out = Map::new();
    if !h.key.is_empty() {
        out.insert("key".into(), Value::String(h.key.clone()));
    }
    if !h.value.is_empty() {
        out.insert("value".into(), Value::String(h.value.clone()));
    }
    if !h.raw_value.is_empty() {
        out.insert("rawValue".into(), Value::String(base64(&h.raw_value)));
    }
    Value::Object(out)
}

/// An enum by name (by number when it has none); left out at 0.
fn put_enum(
    out: &mut Map<String, Value>,
    name: &str,
    n: i32,
    named: impl Fn(i32) -> Option<&'static str>,
) {
    if n == 0 {
        return;
    }
    let v = named(n).map_or_else(|| json!(n), |s| Value::String(s.into()));
    out.insert(name.into(), v);
}

fn struct_to_json(s: &pb::Struct) -> Value {
    Value::Object(
        s.fields
            .iter()
            .map(|(k, v)| (k.clone(), value_to_json(v)))
            .collect(),
    )
}

fn value_to_json(v: &pb::Value) -> Value {
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Value::Null,
        Some(Kind::NumberValue(n)) => json!(n),
        Some(Kind::StringValue(s)) => Value::String(s.clone()),
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::StructValue(s)) => struct_to_json(s),
        Some(Kind::ListValue(l)) => l.values.iter().map(value_to_json).collect(),
    }
}

/// A duration as the mapping writes it: seconds, with 0, 3, 6 or 9
/// fractional digits, and `s`.
fn duration(seconds: i64, nanos: i32) -> String {
    let negative = seconds < 0 || nanos < 0;
    let (s, n) = (seconds.unsigned_abs(), nanos.unsigned_abs());
    let sign = if negative { "-" } else { "" };
    if n == 0 {
        format!("{sign}{s}s")
    } else if n % 1_000_000 == 0 {
        format!("{sign}{s}.{:03}s", n / 1_000_000)
    } else if n % 1_000 == 0 {
        format!("{sign}{s}.{:06}s", n / 1_000)
    } else {
        format!("{sign}{s}.{n:09}s")
    }
}

/// Standard base64, padded, as the mapping writes bytes.
fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_both_names_numbers_as_strings_and_nulls() {
        let req = request_from_json(
            br#"{"domain":"d","descriptors":[{"entries":[{"key":"k","value":"v"}],
                "limit":{"requests_per_unit":"5","unit":"MINUTE"},"hits_addend":7,
                "isNegativeHits":true},{"entries":null}],"hits_addend":null}"#,
        )
        .unwrap();
        let d = &req.descriptors[0];
        assert_eq!(
            (d.entries[0].key.as_str(), d.entries[0].value.as_str()),
            ("k", "v")
        );
        assert_eq!(d.limit.unwrap().requests_per_unit, 5);
        assert_eq!(d.limit.unwrap().unit, RateLimitUnit::Minute as i32);
        assert_eq!(d.hits_addend.unwrap().value, 7);
        assert!(d.is_negative_hits);
        assert!(req.descriptors[1].entries.is_empty());
        assert_eq!(req.hits_addend, 0);
    }

    #[test]
    fn bad_requests_name_their_place() {
        let bad = |body: &str| request_from_json(body.as_bytes()).unwrap_err().to_string();
        assert_eq!(
            bad(r#"{"domian":"d"}"#),
            "domian: not a field of RateLimitRequest"
        );
        assert_eq!(
            bad(r#"{"descriptors":[{"entries":[{"key":1}]}]}"#),
            "descriptors[0].entries[0].key: expected a string"
        );
        assert_eq!(
            bad(r#"{"hitsAddend":-1}"#),
            "hitsAddend: out of range for a uint32"
        );
        assert_eq!(
            bad(r#"{"hitsAddend":1.5}"#),
            "hitsAddend: expected a whole number"
        );
        assert_eq!(
            bad(r#"{"descriptors":[{"limit":{"unit":"FORTNIGHT"}}]}"#),
            "descriptors[0].limit.unit: `FORTNIGHT` is not a RateLimitUnit"
        );
        assert!(bad("[1]").starts_with("the request: expected an object"));
        assert!(bad("{").starts_with("the request: not a JSON document"));
    }

    #[test]
    fn a_response_leaves_out_defaults_and_writes_names_durations_and_bytes() {
        let r = RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    current_limit: Some(
                        envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit {
                            name: String::new(),
                            requests_per_unit: 10,
                            unit: Unit::Minute as i32,
                        },
                    ),
                    limit_remaining: 9,
                    duration_until_reset: Some(pb::Duration { seconds: 59, nanos: 500_000_000 }),
                    quota: None,
                },
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..Default::default()
                },
            ],
            response_headers_to_add: vec![HeaderValue {
                key: "x".into(),
                value: String::new(),
                raw_value: b"hi!?".to_vec(),
            }],
            ..Default::default()
        };
        assert_eq!(
            response_to_json(&r),
            json!({"overallCode":"OK","statuses":[
                {"code":"OK","currentLimit":{"requestsPerUnit":10,"unit":"MINUTE"},"limitRemaining":9,"durationUntilReset":"59.500s"},
                {"code":"OK"}],
                "responseHeadersToAdd":[{"key":"x","rawValue":"aGkhPw=="}]})
        );
        assert_eq!(duration(1, 1_000), "1.000001s");
        assert_eq!(duration(0, 5), "0.000000005s");
        assert_eq!(base64(b"a"), "YQ==");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
    }
}
