//! The JSON Schema of a config file (`docs/sluice.schema.json`), derived
//! from the config types, for editors that complete and check
//! `sluice.toml`.
//!
//! The derives say the tables, keys and types. What they cannot say is
//! here: the text syntaxes of values that deserialize from strings (a
//! rate, a duration, a key source, a network), each a named definition
//! with a `pattern` that accepts everything the parser accepts, and the
//! names of enums defined outside this module.

use std::borrow::Cow;

use schemars::generate::SchemaSettings;
use schemars::transform::{Transform, transform_subschemas};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use sluice_core::AlgorithmKind;

use super::Config;
use crate::forwarded::ForwardedHeader;

/// The schema's `title`.
pub const SCHEMA_TITLE: &str = "Sluice configuration (sluice.toml)";

/// The schema's `$id`: where the repository keeps it.
pub const SCHEMA_ID: &str = "https://example.invalid/sluice/docs/sluice.schema.json";

/// The JSON Schema (draft 2020-12) of a whole config file, as
/// `docs/sluice.schema.json` holds it.
///
/// Tables that refuse unknown keys say `additionalProperties: false`;
/// optional keys are not `required`; TOML has no null, so no key allows
/// one.
pub fn json_schema() -> Schema {
    let generator = SchemaSettings::draft2020_12()
        .with_transform(NoNull)
        .into_generator();
    let mut schema = generator.into_root_schema_for::<Config>();
    schema.insert("$id".to_owned(), SCHEMA_ID.into());
    schema.insert("title".to_owned(), SCHEMA_TITLE.into());
    schema
}

/// Removes `null` from every schema (schemars allows it for `Option`
/// fields): a TOML file cannot write one, and editors would offer it.
#[derive(Debug, Clone, Copy)]
struct NoNull;

impl Transform for NoNull {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        if let Some(serde_json::Value::Array(types)) = obj.get_mut("type") {
            types.retain(|t| *t != "null");
            if let [one] = types.as_slice() {
                let one = one.clone();
                obj.insert("type".to_owned(), one);
            }
        }
        if let Some(serde_json::Value::Array(any_of)) = obj.get_mut("anyOf") {
            any_of.retain(|s| s.get("type").is_none_or(|t| *t != "null"));
            if let [one] = any_of.as_slice()
                && let Some(one) = one.as_object()
            {
                let one = one.clone();
                obj.remove("anyOf");
                for (k, v) in one {
                    obj.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// A whole number other than zero, `_` allowed between digits, as the
/// amount of a rate.
const AMOUNT: &str = r"_*\+?[0-9_]*[1-9][0-9_]*";

/// A string schema with a syntax: its description, pattern and examples.
fn text(description: &str, pattern: &str, examples: &[&str]) -> Schema {
    json_schema!({
        "type": "string",
        "description": description,
        "pattern": pattern,
        "examples": examples,
    })
}

/// A rate as written: `amount/period` or `amount per period`, e.g.
/// `"10/s"`, `"100/min"`, `"50 per 10s"`.
pub(crate) struct RateText;

impl JsonSchema for RateText {
    fn schema_name() -> Cow<'static, str> {
        "Rate".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        text(
            "A rate: a whole number of units of cost, `/` or ` per `, and a \
             period: an optional whole number and a unit (ns, us, ms, s, sec, \
             m, min, h, hr, d, day, w, week, or their words, in any case), \
             e.g. \"10/s\", \"100/min\", \"1_000/day\", \"50 per 10s\".",
            &format!(r"^\s*{AMOUNT}\s*(/| per )\s*([0-9]*[1-9][0-9]*)?\s*[A-Za-z]+\s*$"),
            &["10/s", "100/min", "50 per 10s"],
        )
    }
}

/// A duration as written: a whole number and a unit, e.g. `"500ms"`.
pub(crate) struct DurationText;

/// The pattern of a duration, without anchors.
const DURATION: &str = r"[0-9]*[1-9][0-9]*\s*[A-Za-z]+";

impl JsonSchema for DurationText {
    fn schema_name() -> Cow<'static, str> {
        "Duration".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        text(
            "A duration: a whole number above 0 and a unit (ns, us, ms, s, \
             sec, m, min, h, hr, d, day, w, week, or their words, in any \
             case), e.g. \"500ms\", \"10s\", \"1 min\".",
            &format!(r"^\s*{DURATION}\s*$"),
            &["500ms", "10s", "1h"],
        )
    }
}

/// A duration, or `"0"`, `"0s"` or `"off"` for never.
pub(crate) struct DurationOrOffText;

impl JsonSchema for DurationOrOffText {
    fn schema_name() -> Cow<'static, str> {
        "DurationOrOff".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        text(
            "A duration (a whole number above 0 and a unit, e.g. \"30s\"), \
             or \"0\", \"0s\" or \"off\": never.",
            &format!(r"^\s*({DURATION}|0|0s|off)\s*$"),
            &["30s", "off"],
        )
    }
}

/// A key source as written: `"ip"`, `"global"`, `"bearer"`,
/// `"header:<Name>"`, or `bearer` and `header:` sources joined by `|`.
pub(crate) struct KeySourceText;

impl JsonSchema for KeySourceText {
    fn schema_name() -> Cow<'static, str> {
        "KeySource".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        // A header name is an HTTP token (RFC 9110).
        let header = r"header:\s*[!#$%&'*+.^_`~0-9A-Za-z-]+\s*";
        let either = format!(r"(bearer|{header})");
        text(
            "Where the key comes from: \"ip\" (the client's address), \
             \"global\" (one key for every request), \"bearer\" (the token \
             of `Authorization: Bearer`), \"header:<Name>\" (a request \
             header's value), or several \"bearer\" and \"header:<Name>\" \
             sources joined by `|` (whichever the request has).",
            &format!(r"^(ip|global|bearer|{header}|\s*{either}\s*(\|\s*{either}\s*)+)$"),
            &["header:X-Api-Key", "ip", "bearer|header:X-Api-Key"],
        )
    }
}

/// A network as written: an address and a prefix length, e.g.
/// `"10.0.0.0/8"`.
pub(crate) struct NetText;

impl JsonSchema for NetText {
    fn schema_name() -> Cow<'static, str> {
        "Network".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        text(
            "An IPv4 or IPv6 network: an address and a prefix length, e.g. \
             \"10.0.0.0/8\", \"192.0.2.7/32\", \"2001:db8::/32\".",
            r"^[0-9A-Fa-f:.]+/[0-9]+$",
            &["10.0.0.0/8", "2001:db8::/32"],
        )
    }
}

/// An algorithm's name, as [`AlgorithmKind`] deserializes it.
pub(crate) struct AlgorithmName;

impl JsonSchema for AlgorithmName {
    fn schema_name() -> Cow<'static, str> {
        "Algorithm".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = AlgorithmKind::ALL
            .iter()
            .chain([&AlgorithmKind::Concurrency])
            .map(AlgorithmKind::name)
            .collect();
        json_schema!({
            "type": "string",
            "description": "A rate-limiting algorithm, or `concurrency` \
                            (requests in flight, with `max_in_flight`).",
            "enum": names,
        })
    }
}

/// A forwarding header's name, as [`ForwardedHeader`] deserializes it.
pub(crate) struct ForwardedHeaderName;

impl JsonSchema for ForwardedHeaderName {
    fn schema_name() -> Cow<'static, str> {
        "ForwardedHeader".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<&str> = ForwardedHeader::ALL.iter().map(|h| h.name()).collect();
        json_schema!({
            "type": "string",
            "description": "A forwarding header a trusted proxy writes.",
            "enum": names,
        })
    }
}
