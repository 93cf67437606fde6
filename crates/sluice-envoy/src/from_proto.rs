//! A `ratelimit.config.ratelimit.v3.RateLimitConfig` (what an xDS
//! management server sends) as the YAML config it stands for: the same
//! fields, so it is checked and compiled exactly as a file is.

use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy,
};

use crate::yaml_config::{YamlConfig, YamlDescriptor, YamlRateLimit, YamlReplace};

/// The YAML config a message stands for.
pub fn yaml_of(config: &RateLimitConfig) -> YamlConfig {
    YamlConfig {
        domain: config.domain.clone(),
        descriptors: config.descriptors.iter().map(descriptor).collect(),
    }
}

fn descriptor(d: &RateLimitDescriptor) -> YamlDescriptor {
    YamlDescriptor {
        key: d.key.clone(),
        value: Some(d.value.clone()).filter(|v| !v.is_empty()),
        rate_limit: d.rate_limit.as_ref().map(policy),
        descriptors: d.descriptors.iter().map(descriptor).collect(),
        shadow_mode: d.shadow_mode,
        quota_mode: d.quota_mode,
        share_threshold: false,
        detailed_metric: d.detailed_metric,
        value_to_metric: false,
        metadata: d.metadata.as_ref().map(mapping),
    }
}

fn policy(p: &RateLimitPolicy) -> YamlRateLimit {
    // The message's enum, by its numbers (0 is UNKNOWN: no unit).
    let unit = match p.unit {
        1 => Some("second"),
        2 => Some("minute"),
        3 => Some("hour"),
        4 => Some("day"),
        5 => Some("month"),
        6 => Some("year"),
        7 => Some("week"),
        _ => None,
    };
    YamlRateLimit {
        unit: unit.map(str::to_owned),
        requests_per_unit: Some(p.requests_per_unit),
        // The message has no concurrency limit.
        max_in_flight: None,
        lease: None,
        unlimited: p.unlimited,
        name: Some(p.name.clone()).filter(|n| !n.is_empty()),
        replaces: p
            .replaces
            .iter()
            .map(|r| YamlReplace {
                name: r.name.clone(),
            })
            .collect(),
    }
}

fn mapping(s: &Struct) -> serde_yaml_ng::Mapping {
    let mut fields: Vec<(&String, &Value)> = s.fields.iter().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    fields
        .into_iter()
        .map(|(k, v)| (serde_yaml_ng::Value::String(k.clone()), value(v)))
        .collect()
}

fn value(v: &Value) -> serde_yaml_ng::Value {
    use serde_yaml_ng::Value as Y;
    match &v.kind {
        None | Some(Kind::NullValue(_)) => Y::Null,
        Some(Kind::BoolValue(b)) => Y::Bool(*b),
        Some(Kind::NumberValue(n)) => Y::Number((*n).into()),
        Some(Kind::StringValue(s)) => Y::String(s.clone()),
        Some(Kind::ListValue(l)) => Y::Sequence(l.values.iter().map(value).collect()),
        Some(Kind::StructValue(s)) => Y::Mapping(mapping(s)),
    }
}
