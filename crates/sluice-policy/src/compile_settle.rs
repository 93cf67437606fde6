//! Compiling a limit's `settle` table into a [`Settlement`], each error
//! located at its field.

use http::HeaderName;
use toml::Spanned;

use crate::config::{ConfigError, DebtConfig, SettleConfig, Source, StatusItem};
use crate::settlement::{EstimateFrom, SettleFrom, Settlement, StatusSet, UsageField};

/// The settlement of a limit: its `settle` table compiled; a concurrency
/// limit's, whose slot is given back whole when the request ends (it takes
/// no table), with its wait for a slot (`on_limit = "delay"`); or none.
pub(crate) fn settle_of(
    source: &Source,
    l: &Spanned<crate::config::LimitConfig>,
    name: &str,
    spec: &sluice_core::LimitSpec,
    plan: Option<&crate::config::PlanConfig>,
) -> Result<Option<std::sync::Arc<Settlement>>, ConfigError> {
    let c = l.get_ref();
    let slots = spec.algorithm == sluice_core::AlgorithmKind::Concurrency;
    Ok(match &c.settle {
        Some(t) if slots => {
            return Err(source.error_at(
                Some(t.span()),
                format!(
                    "limit `{name}`: a concurrency limit gives its slots back when a request ends: it takes no `settle`"
                ),
            ));
        }
        Some(t) => Some(std::sync::Arc::new(compile_settle(source, t, name, spec)?)),
        None if slots => Some(std::sync::Arc::new(Settlement {
            wait: crate::compile_slots::slot_wait(source, l, name, plan)?.map(std::sync::Arc::new),
            ..Settlement::slot()
        })),
        None => None,
    })
}

/// A limit's `settle` rule, for a limit named `name` of `spec`.
fn compile_settle(
    source: &Source,
    settle: &Spanned<SettleConfig>,
    name: &str,
    spec: &sluice_core::LimitSpec,
) -> Result<Settlement, ConfigError> {
    let c = settle.get_ref();
    let from = match &c.from {
        None => SettleFrom::Reported,
        Some(f) => settle_from(f.get_ref()).map_err(|m| {
            source.error_at(Some(f.span()), format!("limit `{name}`: settle.from: {m}"))
        })?,
    };
    let estimate = match &c.estimate {
        None => Vec::new(),
        Some(e) => estimates_of(e.get_ref()).ok_or_else(|| {
            source.error_at(
                Some(e.span()),
                format!(
                    "limit `{name}`: settle.estimate: use \"header:<Name>\" or \"json:<field>\" (a whole number at the top level of the request's JSON body), or several joined by `|`, the first the request has standing (the limit's `cost` is the estimate otherwise)"
                ),
            )
        })?,
    };
    let statuses = |field: &Option<Spanned<Vec<StatusItem>>>, what: &str| match field {
        None => Ok(None),
        Some(items) => {
            let texts: Vec<String> = items.get_ref().iter().map(StatusItem::text).collect();
            StatusSet::parse(&texts).map_err(|m| {
                source.error_at(
                    Some(items.span()),
                    format!("limit `{name}`: settle.{what}: {m}"),
                )
            })
        }
    };
    Ok(Settlement {
        from,
        estimate,
        max_debt: c.max_debt.as_ref().map_or(spec.burst, |m| *m.get_ref()),
        forgive: c.debt == DebtConfig::Forgive,
        charge_status: statuses(&c.charge_status, "charge_status")?,
        refund_status: statuses(&c.refund_status, "refund_status")?,
        wait: None,
    })
}

/// `settle.from`'s value.
fn settle_from(text: &str) -> Result<SettleFrom, String> {
    Ok(match text {
        "reported" => SettleFrom::Reported,
        "body_bytes" => SettleFrom::BodyBytes,
        "usage" | "usage.total_tokens" => SettleFrom::Usage(UsageField::Total),
        "usage.prompt_tokens" => SettleFrom::Usage(UsageField::Prompt),
        "usage.completion_tokens" => SettleFrom::Usage(UsageField::Completion),
        "estimate" => SettleFrom::Estimate,
        other => {
            if let Some(name) = other.strip_prefix("header:").and_then(header_name) {
                SettleFrom::Header(name)
            } else if let Some(name) = other.strip_prefix("trailer:").and_then(header_name) {
                SettleFrom::Trailer(name)
            } else {
                return Err(format!(
                    "`{other}`: use \"reported\", \"header:<Name>\", \"trailer:<Name>\", \"body_bytes\", \"usage\", \"usage.prompt_tokens\", \"usage.completion_tokens\" or \"estimate\""
                ));
            }
        }
    })
}

/// A `"header:<Name>"` value's header.
/// `settle.estimate`'s sources, joined by `|`.
fn estimates_of(text: &str) -> Option<Vec<EstimateFrom>> {
    text.split('|')
        .map(|part| {
            let part = part.trim();
            if let Some(field) = part.strip_prefix("json:") {
                let field = field.trim();
                let ok = !field.is_empty()
                    && field.len() <= crate::request_body::MAX_NAME
                    && !field.contains('.');
                return ok.then(|| EstimateFrom::BodyField(field.into()));
            }
            header_of(part).map(EstimateFrom::Header)
        })
        .collect()
}

fn header_of(text: &str) -> Option<HeaderName> {
    text.strip_prefix("header:").and_then(header_name)
}

fn header_name(name: &str) -> Option<HeaderName> {
    HeaderName::from_bytes(name.trim().as_bytes()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_has_a_spelling() {
        assert_eq!(
            settle_from("usage"),
            Ok(SettleFrom::Usage(UsageField::Total))
        );
        assert_eq!(
            settle_from("header:X-Tokens"),
            Ok(SettleFrom::Header(HeaderName::from_static("x-tokens")))
        );
        assert_eq!(
            settle_from("trailer:x-cost"),
            Ok(SettleFrom::Trailer(HeaderName::from_static("x-cost")))
        );
        assert!(settle_from("header:").is_err());
        assert!(settle_from("tokens").is_err());
    }
}
