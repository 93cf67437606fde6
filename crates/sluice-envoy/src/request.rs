//! The shape of a `ShouldRateLimit` request, checked before anything is
//! matched or counted: hostile or broken requests are refused with
//! `INVALID_ARGUMENT` ([`InvalidRequest`]): an empty `domain`, an empty
//! descriptor list (as envoyproxy/ratelimit refuses both), more than
//! [`MAX_DESCRIPTORS`] descriptors, or a descriptor of more than
//! [`MAX_ENTRIES`] entries.

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use tonic::Status;

/// The most descriptors one `ShouldRateLimit` request may carry. Envoy
/// sends one per matched rate-limit action, a handful in practice; each
/// costs a match and a counter.
pub const MAX_DESCRIPTORS: usize = 64;

/// The most entries one descriptor may carry. A descriptor's entries are
/// matched one per level of the config's nesting, which is rarely more than
/// a few deep.
pub const MAX_ENTRIES: usize = 32;

/// The largest request message the server decodes, in bytes (tonic's default
/// is 4 MiB). A `ShouldRateLimit` request is usually a few hundred bytes;
/// one past this limit is refused with `OUT_OF_RANGE` from its length
/// prefix, before it is buffered.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Why a `ShouldRateLimit` request is refused before anything is decided:
/// answered with gRPC status `INVALID_ARGUMENT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRequest {
    /// The request names no domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// The request carries no descriptor.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptors,
    /// The request carries more than [`MAX_DESCRIPTORS`] descriptors.
    #[error("{given} rate limit descriptors: at most {MAX_DESCRIPTORS} are allowed in one request")]
    TooManyDescriptors {
        /// How many the request carries.
        given: usize,
    },
    /// A descriptor carries more than [`MAX_ENTRIES`] entries.
    #[error(
        "rate limit descriptor {index} has {given} entries: at most {MAX_ENTRIES} are allowed in one descriptor"
    )]
    TooManyEntries {
        /// The descriptor's position in the request, from 0.
        index: usize,
        /// How many entries it carries.
        given: usize,
    },
}

impl From<InvalidRequest> for Status {
    fn from(e: InvalidRequest) -> Self {
        Status::invalid_argument(e.to_string())
    }
}

/// Checks a request's shape: [`InvalidRequest`] says what is wrong.
pub fn validate(req: &RateLimitRequest) -> Result<(), InvalidRequest> {
    if req.domain.is_empty() {
        return Err(InvalidRequest::EmptyDomain);
    }
    if req.descriptors.is_empty() {
        return Err(InvalidRequest::NoDescriptors);
    }
    if req.descriptors.len() > MAX_DESCRIPTORS {
        return Err(InvalidRequest::TooManyDescriptors {
            given: req.descriptors.len(),
        });
    }
    match req
        .descriptors
        .iter()
        .position(|d| d.entries.len() > MAX_ENTRIES)
    {
        Some(index) => Err(InvalidRequest::TooManyEntries {
            index,
            given: req.descriptors[index].entries.len(),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

    use super::*;

    fn descriptor(entries: usize) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: (0..entries)
                .map(|i| Entry {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
        RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        }
    }

    #[test]
    fn the_shape_of_a_request_is_checked() {
        assert_eq!(validate(&request("d", vec![descriptor(1)])), Ok(()));
        assert_eq!(
            validate(&request("", vec![descriptor(1)])),
            Err(InvalidRequest::EmptyDomain)
        );
        assert_eq!(
            validate(&request("d", Vec::new())),
            Err(InvalidRequest::NoDescriptors)
        );
        let at_cap = vec![descriptor(MAX_ENTRIES); MAX_DESCRIPTORS];
        assert_eq!(validate(&request("d", at_cap)), Ok(()));
        assert_eq!(
            validate(&request("d", vec![descriptor(1); MAX_DESCRIPTORS + 1])),
            Err(InvalidRequest::TooManyDescriptors {
                given: MAX_DESCRIPTORS + 1
            })
        );
        assert_eq!(
            validate(&request(
                "d",
                vec![descriptor(1), descriptor(MAX_ENTRIES + 1)]
            )),
            Err(InvalidRequest::TooManyEntries {
                index: 1,
                given: MAX_ENTRIES + 1
            })
        );
        let status = Status::from(InvalidRequest::EmptyDomain);
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "rate limit domain must not be empty");
    }
}
