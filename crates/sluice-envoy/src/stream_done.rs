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

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;

/// The key of the entry that marks a descriptor sent when a stream ended.
pub const RECORD_ENTRY: &str = "sluice_record";

/// The request without its marking entries, and which descriptors had one;
/// `None` when none had (the usual call).
pub(crate) fn split(req: &RateLimitRequest) -> Option<(RateLimitRequest, Vec<bool>)> {
    let marked =
        |d: &envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor| {
            d.entries.iter().any(|e| e.key == RECORD_ENTRY)
        };
    if !req.descriptors.iter().any(marked) {
        return None;
    }
    let records: Vec<bool> = req.descriptors.iter().map(marked).collect();
    let mut stripped = req.clone();
    for d in &mut stripped.descriptors {
        d.entries.retain(|e| e.key != RECORD_ENTRY);
    }
    Some((stripped, records))
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
        RateLimitDescriptor, rate_limit_descriptor::Entry,
    };

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
        let (stripped, records) = split(&req).unwrap();
        assert_eq!(records, [false, true]);
        assert_eq!(stripped.descriptors, [plain.clone(), plain]);
    }
}
