//! The slots an answer took, told to Envoy in the answer's
//! `dynamic_metadata`, under [`SLOTS_TAKEN`]: for each concurrency rule
//! (`max_in_flight`) whose descriptors took slots, by the rule's name, the
//! lease they were taken under, as text (`{"sluice_slots": {"uploads":
//! "6755399441055744"}}`; see [`LeaseId`]). The release carries it back,
//! and frees that lease's slots only: a release that comes twice, late (the
//! lease ended, its slots came back by themselves), or for a request that
//! took nothing frees no one else's slot.
//!
//! Envoy sends its stream-done descriptors when every stream ends, the
//! ones it refused (429) and let through on an error included. A release
//! sent for a request that took no slot would free another's. So the
//! stream-done action that releases reads this field with a `metadata`
//! action (`envoy.filters.http.ratelimit`, path `sluice_slots`, the rule's
//! name) whose `descriptor_key` is [`RECORD_ENTRY`](crate::stream_done::RECORD_ENTRY):
//! where the field is absent, Envoy sends no release; where it is there,
//! the entry is taken out before matching, as every such entry is. The
//! field is sent whether or not `response_dynamic_metadata` is on.

use std::collections::BTreeMap;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::{Struct, Value, value::Kind};
use sluice_core::Decision;
use sluice_policy::Verdict;
use sluice_store::seam::LeaseId;

use super::Place;
use super::placed::cost_of;
use crate::rules::Rule;

/// The field of the answer's `dynamic_metadata` that names the slots
/// taken.
pub const SLOTS_TAKEN: &str = "sluice_slots";

/// How a request's descriptors were answered, for [`slots_taken`].
pub(crate) struct Answered<'a> {
    pub(crate) rules: &'a [Option<&'a Rule>],
    pub(crate) places: &'a [Place],
    pub(crate) decisions: &'a [Option<Decision>],
    pub(crate) verdict: Option<&'a Verdict>,
    /// Refused by limits of 0: the charges only peeked.
    pub(crate) zero: bool,
    /// Every descriptor counted on its own.
    pub(crate) compat: bool,
}

/// The slots each concurrency rule took, by name: what its descriptors
/// that were charged and admitted cost (on a refused request, nothing,
/// except with `compat`, where each descriptor counts on its own).
pub(crate) fn slots_taken(req: &RateLimitRequest, a: &Answered<'_>) -> BTreeMap<String, u64> {
    let request_hits = u64::from(req.hits_addend).max(1);
    let admitted = a.verdict.is_some_and(|v| v.allowed);
    let mut taken = BTreeMap::new();
    for (i, d) in req.descriptors.iter().enumerate() {
        let (Some(Some(rule)), Some(place), Some(Some(decided))) =
            (a.rules.get(i), a.places.get(i), a.decisions.get(i))
        else {
            continue;
        };
        let charged = matches!(place, Place::Enforced(_) | Place::Shadow(_))
            && decided.allowed
            && !a.zero
            && (a.compat || admitted);
        let cost = cost_of(d, request_hits);
        if charged && cost > 0 && rule.in_flight() {
            *taken.entry(rule.name().to_string()).or_insert(0) += cost;
        }
    }
    taken
}

/// `metadata` (the answer's `dynamic_metadata`, if any) with the rules
/// whose slots were `taken` under [`SLOTS_TAKEN`], each naming the `lease`
/// they were taken under (its release names it back); unchanged when none
/// were.
pub(crate) fn with_slots(
    metadata: Option<Struct>,
    taken: BTreeMap<String, u64>,
    lease: Option<LeaseId>,
) -> Option<Struct> {
    let Some(lease) = lease.filter(|_| !taken.is_empty()) else {
        return metadata;
    };
    let fields = taken
        .into_keys()
        .map(|name| (name, string(lease.to_string())))
        .collect();
    let mut out = metadata.unwrap_or_default();
    out.fields.insert(
        SLOTS_TAKEN.to_owned(),
        Value {
            kind: Some(Kind::StructValue(Struct { fields })),
        },
    );
    Some(out)
}

fn string(s: String) -> Value {
    Value {
        kind: Some(Kind::StringValue(s)),
    }
}
