//! The answer's `dynamic_metadata` (with `[envoy]
//! response_dynamic_metadata`), shaped as the reference server shapes it
//! (`ratelimitToMetadata`): the domain, each descriptor's entries
//! (`key=value`), its per-request limit and its `hits_addend`, the request's
//! `hits_addend` when set, and under `metadata` the `metadata` of the
//! rules whose descriptors passed, merged (a field already present is kept,
//! maps are merged field by field).

use std::collections::BTreeMap;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

use crate::rules::Rule;

/// The metadata of an answer to `req`, whose descriptors met `rules` and
/// were answered `statuses`.
pub(crate) fn of(
    req: &RateLimitRequest,
    rules: &[Option<&Rule>],
    statuses: &[DescriptorStatus],
) -> Struct {
    let mut fields = BTreeMap::new();
    fields.insert("domain".to_owned(), string(&req.domain));
    let descriptors = req
        .descriptors
        .iter()
        .map(|d| structure(descriptor(d)))
        .collect();
    fields.insert("descriptors".to_owned(), list(descriptors));
    if req.hits_addend != 0 {
        fields.insert("hitsAddend".to_owned(), number(f64::from(req.hits_addend)));
    }
    let mut passed = Struct::default();
    for (rule, status) in rules.iter().zip(statuses) {
        if status.code == Code::OverLimit as i32 {
            continue;
        }
        if let Some(m) = rule.and_then(|r| r.metadata.as_ref()) {
            merge(&mut passed, m);
        }
    }
    if !passed.fields.is_empty() {
        fields.insert("metadata".to_owned(), structure(passed));
    }
    Struct {
        fields: fields.into_iter().collect(),
    }
}

fn descriptor(d: &RateLimitDescriptor) -> Struct {
    let mut fields = BTreeMap::new();
    let entries = d
        .entries
        .iter()
        .map(|e| string(&format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(l) = &d.limit {
        let text = format!("requests_per_unit:{} unit:{}", l.requests_per_unit, l.unit);
        fields.insert("limit".to_owned(), string(&text));
    }
    if let Some(h) = &d.hits_addend {
        fields.insert("hitsAddend".to_owned(), number(h.value as f64));
    }
    Struct {
        fields: fields.into_iter().collect(),
    }
}

/// Adds `src`'s fields to `dest`: new fields are added, maps present in
/// both are merged, anything else already in `dest` stays.
fn merge(dest: &mut Struct, src: &Struct) {
    for (k, v) in &src.fields {
        match dest.fields.get_mut(k) {
            None => {
                dest.fields.insert(k.clone(), v.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(d)),
            }) => {
                if let Some(Kind::StructValue(s)) = &v.kind {
                    merge(d, s);
                }
            }
            Some(_) => {}
        }
    }
}

fn string(s: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(s.to_owned())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn structure(s: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(s)),
    }
}
