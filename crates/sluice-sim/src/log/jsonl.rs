//! JSON lines: one object per line, read in one pass that borrows from the
//! line, the cost field (a dotted path into nested objects) read on the
//! way without building the object.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use sluice_core::Nanos;
use sluice_core::clock::SECOND;
use sluice_policy::settlement::MAX_COST;
use smallvec::SmallVec;

use super::{CostError, Entry, HeaderKey, LineError, excerpt, is_token, target_path};
use crate::time::{from_epoch_f64, from_epoch_u64, parse_rfc3339};

/// The longest duration a line may give; longer ones are cut to it.
pub const MAX_DURATION: Nanos = 86_400 * SECOND;

/// The fields of a JSON line that the replay reads itself: a cost field
/// may not be one of them (but `cost`, the estimate, may be the cost).
pub(super) const RESERVED: [&str; 7] = [
    "time", "method", "path", "ip", "headers", "status", "duration",
];

/// Parses JSON lines:
///
/// ```json
/// {"time": "2026-11-30T03:11:35.25Z", "method": "GET", "path": "/export?x=1",
///  "ip": "192.0.2.7", "headers": {"X-Api-Key": "alice"}, "cost": 2,
///  "status": 200, "duration": 0.25, "usage": {"total_tokens": 812}}
/// ```
///
/// `time` is RFC 3339, or a number of seconds (with a fraction) or
/// milliseconds since the epoch. `status` is read when it is a status (else
/// ignored); `duration` is in seconds (at most [`MAX_DURATION`]). With a
/// cost field ([`with_cost_field`](Self::with_cost_field)), each line's
/// actual cost is read from it. Other fields are ignored.
#[derive(Debug, Clone, Default)]
pub struct JsonlParser {
    cost: Option<Vec<Box<str>>>,
}

#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// A time as the line wrote it, already converted.
struct JsonTime(Result<Nanos, String>);

impl<'de> Deserialize<'de> for JsonTime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = JsonTime;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an RFC 3339 string or an epoch number")
            }
            fn visit_u64<E>(self, v: u64) -> Result<JsonTime, E> {
                Ok(JsonTime(from_epoch_u64(v).ok_or_else(|| v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<JsonTime, E> {
                Ok(JsonTime(
                    u64::try_from(v)
                        .ok()
                        .and_then(from_epoch_u64)
                        .ok_or_else(|| v.to_string()),
                ))
            }
            fn visit_f64<E>(self, v: f64) -> Result<JsonTime, E> {
                Ok(JsonTime(from_epoch_f64(v).ok_or_else(|| v.to_string())))
            }
            fn visit_str<E>(self, v: &str) -> Result<JsonTime, E> {
                Ok(JsonTime(parse_rfc3339(v).ok_or_else(|| excerpt(v))))
            }
        }
        d.deserialize_any(V)
    }
}

/// A duration in seconds (a number, or a number in a string as nginx's
/// `"$request_time"` writes it), to nanoseconds.
struct Seconds(Nanos);

impl<'de> Deserialize<'de> for Seconds {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Seconds;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a duration in seconds")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Seconds, E> {
                Ok(Seconds(v.saturating_mul(SECOND).min(MAX_DURATION)))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Seconds, E> {
                let v = u64::try_from(v)
                    .map_err(|_| E::custom(format!("`duration` {v} is negative")))?;
                self.visit_u64(v)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Seconds, E> {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(E::custom(format!(
                        "`duration` {v} is not a number of seconds"
                    )));
                }
                // Within 0..=MAX_DURATION by the check and the `min`.
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let nanos = (v.min(86_400.0) * 1e9).round() as u64;
                Ok(Seconds(nanos.min(MAX_DURATION)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Seconds, E> {
                match v.trim().parse::<f64>() {
                    Ok(n) => self.visit_f64(n),
                    Err(_) => Err(E::custom(format!(
                        "`duration` `{}` is not a number of seconds",
                        excerpt(v)
                    ))),
                }
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct JsonHeaders<'a>(SmallVec<[(HeaderKey<'a>, Cow<'a, str>); 4]>);

impl<'de: 'a, 'a> Deserialize<'de> for JsonHeaders<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for V<'a> {
            type Value = JsonHeaders<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of header names to string values")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JsonHeaders::default())
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut out = SmallVec::new();
                while let Some((Text(k), Text(v))) = map.next_entry::<Text<'a>, Text<'a>>()? {
                    out.push((HeaderKey::Name(k), v));
                }
                Ok(JsonHeaders(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// Reads a cost at the rest of a dotted path within a value: a whole
/// number, or a string of digits, at its end. What is not there, or not a
/// whole number, is a [`CostError`] (the line itself still parses); only
/// JSON that does not parse is an error of the line.
struct CostAt<'p>(&'p [Box<str>]);

impl CostAt<'_> {
    /// A whole number found where the path led.
    fn whole(&self, v: u64) -> Result<u64, CostError> {
        if self.0.is_empty() {
            Ok(v.min(MAX_COST))
        } else {
            Err(CostError::NotWhole(v.to_string()))
        }
    }

    /// Something that is not a cost, shown as `shown`.
    fn not_whole(shown: impl Into<String>) -> Result<u64, CostError> {
        Err(CostError::NotWhole(shown.into()))
    }
}

impl<'de> DeserializeSeed<'de> for CostAt<'_> {
    type Value = Result<u64, CostError>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for CostAt<'_> {
    type Value = Result<u64, CostError>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a cost")
    }

    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(self.whole(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(match u64::try_from(v) {
            Ok(v) => self.whole(v),
            Err(_) => Self::not_whole(v.to_string()),
        })
    }

    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        if v.is_finite() && v >= 0.0 && v.fract() == 0.0 {
            // Whole and not negative; clamped to MAX_COST (2^53, exact).
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = v.min(MAX_COST as f64) as u64;
            return Ok(self.whole(n));
        }
        Ok(Self::not_whole(v.to_string()))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        let t = v.trim();
        if self.0.is_empty() && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
            // All digits: only too many of them fail to parse.
            return Ok(self.whole(t.parse::<u64>().unwrap_or(MAX_COST)));
        }
        Ok(Self::not_whole(excerpt(v)))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Self::not_whole(v.to_string()))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(CostError::Missing))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Self::not_whole("[…]"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let Some((first, rest)) = self.0.split_first() else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            return Ok(Self::not_whole("{…}"));
        };
        let mut found = Err(CostError::Missing);
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            if *key == **first {
                found = map.next_value_seed(CostAt(rest))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// The fields of a line, as read.
#[derive(Default)]
struct Fields<'a> {
    time: Option<JsonTime>,
    method: Option<Cow<'a, str>>,
    path: Option<Cow<'a, str>>,
    ip: Option<Cow<'a, str>>,
    headers: Option<JsonHeaders<'a>>,
    cost: Option<Option<u64>>,
    status: Option<Option<u16>>,
    duration: Option<Option<Seconds>>,
    actual: Option<Result<u64, CostError>>,
}

/// Sets a field read once, or fails on a second.
fn once<T, E: serde::de::Error>(slot: &mut Option<T>, v: T, name: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::duplicate_field(name));
    }
    *slot = Some(v);
    Ok(())
}

/// A line's object, visited once: the replay's fields, and the cost at
/// the cost field's path (`None`: no cost field).
struct Line<'p>(Option<&'p [Box<str>]>);

impl<'de> Visitor<'de> for Line<'_> {
    type Value = Fields<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Fields<'de>, M::Error> {
        let mut f = Fields::default();
        while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
            match &*key {
                "time" => once(&mut f.time, map.next_value()?, "time")?,
                "method" => once(&mut f.method, map.next_value::<Text<'de>>()?.0, "method")?,
                "path" => once(&mut f.path, map.next_value::<Text<'de>>()?.0, "path")?,
                "ip" => once(&mut f.ip, map.next_value::<Text<'de>>()?.0, "ip")?,
                "headers" => once(&mut f.headers, map.next_value()?, "headers")?,
                "duration" => once(&mut f.duration, map.next_value()?, "duration")?,
                "status" => {
                    let read = map.next_value_seed(CostAt(&[]))?;
                    let status = read
                        .ok()
                        .and_then(|s| u16::try_from(s).ok())
                        .filter(|s| (100..=599).contains(s));
                    once(&mut f.status, status, "status")?;
                }
                "cost" => {
                    let cost: Option<u64> = map.next_value()?;
                    once(&mut f.cost, cost, "cost")?;
                    if self.0.is_some_and(|p| p.len() == 1 && &*p[0] == "cost") {
                        f.actual = Some(cost.ok_or(CostError::Missing));
                    }
                }
                k => match self.0 {
                    Some([first, rest @ ..]) if **first == *k => {
                        f.actual = Some(map.next_value_seed(CostAt(rest))?);
                    }
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                },
            }
        }
        Ok(f)
    }
}

impl JsonlParser {
    /// A parser that reads no cost field.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser that reads each line's actual cost at `path`: a field's
    /// name, then the names of the objects within it (`usage.total_tokens`
    /// is `["usage", "total_tokens"]`).
    pub fn with_cost_field(path: Vec<Box<str>>) -> Self {
        Self { cost: Some(path) }
    }

    /// Parses one line (without its line break).
    pub fn parse<'a>(&mut self, line: &'a str) -> Result<Entry<'a>, LineError> {
        let json = |e: serde_json::Error| LineError::Json(e.to_string());
        let mut de = serde_json::Deserializer::from_str(line);
        let f = (&mut de)
            .deserialize_map(Line(self.cost.as_deref()))
            .map_err(json)?;
        de.end().map_err(json)?;
        let missing = |name: &str| LineError::Json(format!("missing field `{name}`"));
        let time = f.time.ok_or_else(|| missing("time"))?.0;
        let time = time.map_err(LineError::BadTime)?;
        let method = f.method.ok_or_else(|| missing("method"))?;
        if !is_token(&method) {
            return Err(LineError::BadRequest(excerpt(&method)));
        }
        let path = match f.path.ok_or_else(|| missing("path"))? {
            Cow::Borrowed(p) => {
                Cow::Borrowed(target_path(p).ok_or_else(|| LineError::BadRequest(excerpt(p)))?)
            }
            Cow::Owned(p) => Cow::Owned(
                target_path(&p)
                    .ok_or_else(|| LineError::BadRequest(excerpt(&p)))?
                    .to_owned(),
            ),
        };
        let ip = f.ip.ok_or_else(|| missing("ip"))?;
        let peer: IpAddr = ip.parse().map_err(|_| LineError::BadIp(excerpt(&ip)))?;
        Ok(Entry {
            time,
            method,
            path,
            peer,
            headers: f.headers.unwrap_or_default().0,
            cost: f.cost.flatten(),
            status: f.status.flatten(),
            duration: f.duration.flatten().map(|d| d.0),
            actual: self
                .cost
                .as_ref()
                .map(|_| f.actual.unwrap_or(Err(CostError::Missing))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::CostField;

    const T: Nanos = 971_211_336 * SECOND;

    #[test]
    fn jsonl_lines() {
        let mut p = JsonlParser::new();
        let e = p
            .parse(r#"{"time":"2000-10-10T20:55:36Z","method":"GET","path":"/export?x=1","ip":"192.0.2.7","headers":{"X-Api-Key":"alice"},"cost":3,"status":200}"#)
            .unwrap();
        assert_eq!(e.time, T);
        assert_eq!(e.path, "/export");
        assert_eq!(e.cost, Some(3));
        assert_eq!(
            e.headers.as_slice(),
            &[(
                HeaderKey::Name(Cow::Borrowed("X-Api-Key")),
                Cow::Borrowed("alice")
            )]
        );
        assert!(matches!(e.method, Cow::Borrowed(_)));
        // Epoch seconds, milliseconds, escapes, null headers.
        let e = p
            .parse(r#"{"time":971211336,"method":"GET","path":"/","ip":"::1"}"#)
            .unwrap();
        assert_eq!(e.time, T);
        let e = p
            .parse(r#"{"time":971211336250,"method":"GET","path":"/a\u0062","ip":"::1","headers":null}"#)
            .unwrap();
        assert_eq!(e.time, T + SECOND / 4);
        assert_eq!(e.path, "/ab");
        let e = p
            .parse(r#"{"time":971211336.5,"method":"GET","path":"/","ip":"::1"}"#)
            .unwrap();
        assert_eq!(e.time, T + SECOND / 2);
    }

    #[test]
    fn jsonl_malformed_lines_are_errors() {
        let mut p = JsonlParser::new();
        let cases = [
            ("", "JSON"),
            ("{", "JSON"),
            ("[1,2]", "JSON"),
            (r#"{"method":"GET","path":"/","ip":"::1"}"#, "time"),
            (
                r#"{"time":"yesterday","method":"GET","path":"/","ip":"::1"}"#,
                "BadTime",
            ),
            (
                r#"{"time":-5,"method":"GET","path":"/","ip":"::1"}"#,
                "BadTime",
            ),
            (
                r#"{"time":1,"method":"G T","path":"/","ip":"::1"}"#,
                "BadRequest",
            ),
            (
                r#"{"time":1,"method":"GET","path":"x","ip":"::1"}"#,
                "BadRequest",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"nope"}"#,
                "BadIp",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"::1","headers":{"a":1}}"#,
                "JSON",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"::1","cost":-1}"#,
                "JSON",
            ),
        ];
        for (line, what) in cases {
            let e = p.parse(line).expect_err(line);
            let text = format!("{e:?} {e}");
            assert!(text.contains(what), "{line}: {text}");
        }
    }

    /// Each line's actual cost from a cost field, with the rest of the
    /// line's fields.
    fn actual(path: &str, line: &str) -> Option<Result<u64, CostError>> {
        let field = match CostField::parse(crate::Format::Jsonl, path).unwrap() {
            CostField::Json(p) => p,
            CostField::BodyBytes => unreachable!(),
        };
        JsonlParser::with_cost_field(field)
            .parse(line)
            .unwrap_or_else(|e| panic!("{line}: {e}"))
            .actual
    }

    #[test]
    fn jsonl_costs_are_read_at_a_dotted_path() {
        let line =
            |rest: &str| format!(r#"{{"time":1,"method":"POST","path":"/","ip":"::1"{rest}}}"#);
        let at = |path: &str, rest: &str| actual(path, &line(rest));
        assert_eq!(at("tokens", r#","tokens":42"#), Some(Ok(42)));
        assert_eq!(at("tokens", r#","tokens":" 42 ""#), Some(Ok(42)));
        assert_eq!(at("tokens", r#","tokens":42.0"#), Some(Ok(42)));
        assert_eq!(
            at(
                "usage.total_tokens",
                r#","usage":{"prompt_tokens":5,"total_tokens":812,"x":[1,{"y":2}]},"z":{"total_tokens":1}"#
            ),
            Some(Ok(812))
        );
        assert_eq!(at("a.b.c", r#","a":{"b":{"c":7}}"#), Some(Ok(7)));
        assert_eq!(
            at("tokens", r#","tokens":99999999999999999999999"#),
            Some(Ok(MAX_COST))
        );
        assert_eq!(
            at("tokens", r#","tokens":"99999999999999999999999""#),
            Some(Ok(MAX_COST))
        );
        // The estimate's own field may be the cost.
        assert_eq!(at("cost", r#","cost":9"#), Some(Ok(9)));
        assert_eq!(at("cost", ""), Some(Err(CostError::Missing)));
        // Missing or not a whole number: the line still parses.
        let missing = Some(Err(CostError::Missing));
        assert_eq!(at("tokens", ""), missing);
        assert_eq!(at("tokens", r#","tokens":null"#), missing);
        assert_eq!(
            at("usage.total_tokens", r#","usage":{"prompt_tokens":5}"#),
            missing
        );
        assert_eq!(at("usage.total_tokens", r#","usage":null"#), missing);
        for bad in ["-3", "1.5", "\"12k\"", "\"\"", "true", "[1]", "{\"a\":1}"] {
            let got = at("tokens", &format!(r#","tokens":{bad}"#));
            assert!(
                matches!(got, Some(Err(CostError::NotWhole(_)))),
                "{bad}: {got:?}"
            );
        }
        assert!(matches!(
            at("usage.total_tokens", r#","usage":5"#),
            Some(Err(CostError::NotWhole(_)))
        ));
        // Without a cost field nothing is read.
        let l = line(r#","tokens":4"#);
        let e = JsonlParser::new().parse(&l).unwrap();
        assert_eq!(e.actual, None);
    }

    #[test]
    fn jsonl_status_and_duration() {
        let mut p = JsonlParser::new();
        let line =
            |rest: &str| format!(r#"{{"time":1,"method":"GET","path":"/","ip":"::1"{rest}}}"#);
        let l = line(r#","status":503,"duration":0.25"#);
        let e = p.parse(&l).unwrap();
        assert_eq!((e.status, e.duration), (Some(503), Some(SECOND / 4)));
        let l = line(r#","status":"200","duration":"2""#);
        let e = p.parse(&l).unwrap();
        assert_eq!((e.status, e.duration), (Some(200), Some(2 * SECOND)));
        let l = line(r#","status":"OK","duration":null"#);
        let e = p.parse(&l).unwrap();
        assert_eq!(
            (e.status, e.duration),
            (None, None),
            "a status that is none is ignored"
        );
        let l = line(r#","status":700,"duration":1e9"#);
        let e = p.parse(&l).unwrap();
        assert_eq!((e.status, e.duration), (None, Some(MAX_DURATION)));
        for bad in [
            r#","duration":-1"#,
            r#","duration":"soon""#,
            r#","duration":[1]"#,
        ] {
            let err = p.parse(&line(bad)).expect_err(bad);
            assert!(err.to_string().contains("duration"), "{bad}: {err}");
        }
        let err = p.parse(&line(r#","time":2"#)).unwrap_err();
        assert!(err.to_string().contains("duplicate field `time`"), "{err}");
    }

    #[test]
    fn cost_fields_are_checked_for_their_format() {
        use crate::Format::{Jsonl, Nginx};
        assert_eq!(
            CostField::parse(Nginx, "body_bytes_sent"),
            Ok(CostField::BodyBytes)
        );
        assert_eq!(
            CostField::parse(Nginx, "$body_bytes_sent"),
            Ok(CostField::BodyBytes)
        );
        assert!(CostField::parse(Nginx, "tokens").is_err());
        assert_eq!(
            CostField::parse(Jsonl, "usage.total_tokens"),
            Ok(CostField::Json(vec!["usage".into(), "total_tokens".into()]))
        );
        for bad in [
            "",
            "a..b",
            ".a",
            "time",
            "headers.x-tokens",
            "cost.total",
            "status",
        ] {
            assert!(CostField::parse(Jsonl, bad).is_err(), "{bad}");
        }
    }
}
