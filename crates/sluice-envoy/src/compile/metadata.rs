//! A descriptor's `metadata`, read from YAML as a protobuf `Struct` for
//! the answer's `dynamic_metadata`: string keys, plain values.

use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};

/// `metadata` as a protobuf `Struct`: string keys, plain values.
pub(super) fn to_struct(m: &serde_yaml_ng::Mapping) -> Result<Struct, String> {
    let mut fields = std::collections::BTreeMap::new();
    for (k, v) in m {
        let key = match k {
            serde_yaml_ng::Value::String(s) => s.clone(),
            serde_yaml_ng::Value::Number(n) => n.to_string(),
            serde_yaml_ng::Value::Bool(b) => b.to_string(),
            _ => return Err("keys must be strings".into()),
        };
        fields.insert(key, to_value(v)?);
    }
    Ok(Struct {
        fields: fields.into_iter().collect(),
    })
}

fn to_value(v: &serde_yaml_ng::Value) -> Result<Value, String> {
    use serde_yaml_ng::Value as Y;
    let kind = match v {
        Y::Null => Kind::NullValue(0),
        Y::Bool(b) => Kind::BoolValue(*b),
        Y::Number(n) => Kind::NumberValue(n.as_f64().ok_or("a number out of range")?),
        Y::String(s) => Kind::StringValue(s.clone()),
        Y::Sequence(items) => Kind::ListValue(ListValue {
            values: items.iter().map(to_value).collect::<Result<_, _>>()?,
        }),
        Y::Mapping(m) => Kind::StructValue(to_struct(m)?),
        Y::Tagged(_) => return Err("tagged values are not supported".into()),
    };
    Ok(Value { kind: Some(kind) })
}
