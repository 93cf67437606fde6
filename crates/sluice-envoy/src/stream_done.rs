//! Costs known only when a stream ends: Envoy sends the descriptors of a
//! rate limit action with `apply_on_stream_done` after the stream, with
//! the final `hits_addend` (the tokens of an LLM call, from dynamic
//! metadata). The request already happened: such a call must **record**
//! its hits, past the limit if need be (as debt), not decide.
//!
//! The protocol does not mark such a call, so the Envoy config marks its
//! descriptors: the stream-done action adds an entry whose key is
//! [`RECORD_ENTRY`] (a `generic_key` with that `descriptor_key`). Sluice
//! takes the entry out before matching, so the descriptor meets the same
//! rule and counter as the one sent when the request began, and debits
//! its hits there ([`Engine::debit`](sluice_policy::Engine::debit)): never
//! refused, into debt up to one burst (the rule's limit), the rest
//! reported as excess. The descriptor answers `OK` with its limit's state
//! after.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_store::seam::LeaseId;

/// The key of the entry that marks a descriptor sent when a stream ended.
pub const RECORD_ENTRY: &str = "sluice_record";

/// A request whose descriptors had marking entries, without them.
pub(crate) struct Marked {
    /// The request, its marking entries taken out.
    pub(crate) request: RateLimitRequest,
    /// Which descriptors had one.
    pub(crate) records: Vec<bool>,
    /// The lease each one's entry names, if it names one: a release of
    /// the concurrency slots a request took ([`SLOTS_TAKEN`](crate::answer::SLOTS_TAKEN)).
    pub(crate) leases: Vec<Option<LeaseId>>,
}

/// The request without its marking entries, and what they said; `None`
/// when no descriptor had one (the usual call).
pub(crate) fn split(req: &RateLimitRequest) -> Option<Marked> {
    fn mark(d: &RateLimitDescriptor) -> Option<&Entry> {
        d.entries.iter().find(|e| e.key == RECORD_ENTRY)
    }
    if !req.descriptors.iter().any(|d| mark(d).is_some()) {
        return None;
    }
    let records = req.descriptors.iter().map(|d| mark(d).is_some()).collect();
    let leases = req
        .descriptors
        .iter()
        .map(|d| mark(d).and_then(|e| LeaseId::parse(&e.value)))
        .collect();
    let mut request = req.clone();
    for d in &mut request.descriptors {
        d.entries.retain(|e| e.key != RECORD_ENTRY);
    }
    Some(Marked {
        request,
        records,
        leases,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn marked_descriptors_lose_their_mark_and_are_named() {
        let plain = RateLimitDescriptor {
            entries: vec![entry("user", "a")],
            ..Default::default()
        };
        let marked = RateLimitDescriptor {
            entries: vec![entry(RECORD_ENTRY, "stream_done"), entry("user", "a")],
            ..Default::default()
        };
        let req = RateLimitRequest {
            domain: "llm".into(),
            descriptors: vec![plain.clone()],
            hits_addend: 0,
        };
        assert!(split(&req).is_none());
        let req = RateLimitRequest {
            descriptors: vec![plain.clone(), marked],
            ..req
        };
        let marked = split(&req).unwrap();
        assert_eq!(marked.records, [false, true]);
        assert_eq!(marked.leases, [None, None], "`stream_done` names no lease");
        assert_eq!(marked.request.descriptors, [plain.clone(), plain]);
    }
}
