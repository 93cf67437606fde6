//! Hostile input to the Envoy Rate Limit Service, over real gRPC against
//! the real binary: too many descriptors, too many entries in one, an empty
//! domain and an empty descriptor list are `INVALID_ARGUMENT` (and decide
//! nothing); a message past the server's decoding limit is refused; a
//! normal call afterwards is still `OK`.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::Channel;

use crate::envoy_rls::{descriptor, request, start};

/// The caps `sluice-envoy` documents.
const MAX_DESCRIPTORS: usize = 64;
const MAX_ENTRIES: usize = 32;

/// The status of a call that must fail.
async fn refusal(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> tonic::Status {
    match c.should_rate_limit(r).await {
        Ok(reply) => panic!("expected an error, got {:?}", reply.into_inner()),
        Err(status) => status,
    }
}

/// A normal call: one per-key descriptor, `OK`, and its remaining count.
async fn normal_call(c: &mut RateLimitServiceClient<Channel>, key: &str) -> u32 {
    let r = c
        .should_rate_limit(request(vec![descriptor(&[("api_key", key)])], 1))
        .await
        .expect("a normal call succeeds")
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
    r.statuses[0].limit_remaining
}

/// A descriptor of `n` entries (`k0=v0`, `k1=v1`, …).
fn wide_descriptor(n: usize) -> RateLimitDescriptor {
    let entries: Vec<(String, String)> =
        (0..n).map(|i| (format!("k{i}"), format!("v{i}"))).collect();
    let refs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    descriptor(&refs)
}

#[tokio::test]
async fn too_many_descriptors_are_invalid_argument() {
    let (sluice, mut c) = start().await;
    let many = |n: usize| {
        request(
            (0..n)
                .map(|i| descriptor(&[("remote_address", &format!("10.0.0.{i}"))]))
                .collect(),
            1,
        )
    };
    let status = refusal(&mut c, many(MAX_DESCRIPTORS + 1)).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("64"), "{status:?}");
    // Exactly the cap is a normal request.
    let r = c
        .should_rate_limit(many(MAX_DESCRIPTORS))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.statuses.len(), MAX_DESCRIPTORS);
    assert_eq!(normal_call(&mut c, "hostile-a").await, 59);
    assert!(!sluice.log().contains("panicked"), "{}", sluice.log());
}

#[tokio::test]
async fn too_many_entries_are_invalid_argument_and_count_nothing() {
    let (_sluice, mut c) = start().await;
    // A valid per-key descriptor beside one that is too wide: the call is
    // refused as a whole, and the valid descriptor is not counted.
    let status = refusal(
        &mut c,
        request(
            vec![
                descriptor(&[("api_key", "hostile-b")]),
                wide_descriptor(MAX_ENTRIES + 1),
            ],
            1,
        ),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("32"), "{status:?}");
    assert_eq!(
        normal_call(&mut c, "hostile-b").await,
        59,
        "the refused call counted nothing"
    );
    // Exactly the cap is a normal (unmatched) descriptor.
    let r = c
        .should_rate_limit(request(vec![wide_descriptor(MAX_ENTRIES)], 1))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.overall_code, Code::Ok as i32);
}

// envoyproxy/ratelimit refuses both of the next requests: its
// `shouldRateLimitWorker` (src/service/ratelimit.go) fails with "rate limit
// domain must not be empty" and "rate limit descriptor list must not be
// empty". It returns them as plain errors (which gRPC reports as UNKNOWN);
// Sluice answers with the code they mean, INVALID_ARGUMENT.

#[tokio::test]
async fn an_empty_domain_is_invalid_argument() {
    let (_sluice, mut c) = start().await;
    let mut r = request(vec![descriptor(&[("api_key", "hostile-c")])], 1);
    r.domain = String::new();
    let status = refusal(&mut c, r).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("domain"), "{status:?}");
    assert_eq!(normal_call(&mut c, "hostile-c").await, 59);
}

#[tokio::test]
async fn an_empty_descriptor_list_is_invalid_argument() {
    let (_sluice, mut c) = start().await;
    let status = refusal(&mut c, request(Vec::new(), 1)).await;
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("descriptor"), "{status:?}");
    assert_eq!(normal_call(&mut c, "hostile-d").await, 59);
}

#[tokio::test]
async fn a_message_past_the_decoding_limit_is_refused() {
    let (sluice, mut c) = start().await;
    // One descriptor whose value alone is 100 KiB: past the 64 KiB limit.
    let big = "x".repeat(100 * 1024);
    let status = refusal(
        &mut c,
        request(vec![descriptor(&[("api_key", big.as_str())])], 1),
    )
    .await;
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
    assert_eq!(normal_call(&mut c, "hostile-e").await, 59);
    assert!(!sluice.log().contains("panicked"), "{}", sluice.log());
}
