//! The Envoy Rate Limit Service of `sluice serve --config examples/envoy.toml`
//! (which loads examples/envoy/ratelimit.yaml as it is), driven by a real
//! gRPC client (tonic, with envoy-types' generated client).

use crate::common;

use common::{Sluice, example_path};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

/// A descriptor of these entries (the Redis tests use it too).
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A request in the `edge_proxy` domain (the Redis tests use it too).
pub fn request(descriptors: Vec<RateLimitDescriptor>, hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: "edge_proxy".into(),
        descriptors,
        hits_addend: hits,
    }
}

/// Sluice with `examples/envoy.toml`, and a gRPC client of its RLS.
pub(crate) async fn start() -> (Sluice, RateLimitServiceClient<Channel>) {
    let sluice = Sluice::start_args(
        &example_path("envoy.toml"),
        &["--grpc-listen", "127.0.0.1:0"],
    );
    let client = sluice.rls_client().await;
    (sluice, client)
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> RateLimitResponse {
    c.should_rate_limit(r).await.unwrap().into_inner()
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

#[tokio::test]
async fn over_limit_after_n_hits_with_full_statuses() {
    let (_sluice, mut c) = start().await;
    let export = || {
        request(
            vec![descriptor(&[("api_key", "k1"), ("path", "/export")])],
            0,
        )
    };
    for left in (0..5).rev() {
        let r = ask(&mut c, export()).await;
        assert_eq!(r.overall_code, OK);
        let s = &r.statuses[0];
        assert_eq!((s.code, s.limit_remaining), (OK, left));
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("export", 5, 3)
        );
        assert!(header(&r, "RateLimit").unwrap().contains("\"export\";r="));
    }
    let r = ask(&mut c, export()).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].code, OVER);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert!(reset.seconds > 0 && reset.seconds <= 3600, "{reset:?}");
    assert!(header(&r, "Retry-After").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(
        header(&r, "RateLimit-Policy"),
        Some("\"export\";q=5;w=3600")
    );
}

#[tokio::test]
async fn hits_addend_per_request_and_per_descriptor() {
    let (_sluice, mut c) = start().await;
    let d = || descriptor(&[("api_key", "k2"), ("path", "/export")]);
    let r = ask(&mut c, request(vec![d()], 3)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    // A descriptor's own hits_addend overrides the request's.
    let mut three = d();
    three.hits_addend = Some(UInt64Value { value: 3 });
    let r = ask(&mut c, request(vec![three], 1)).await;
    assert_eq!(r.overall_code, OVER, "3 hits do not fit in 2");
    // The refusal consumed nothing: 2 still fit.
    let r = ask(&mut c, request(vec![d()], 2)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
}

#[tokio::test]
async fn one_descriptor_over_limit_refuses_all_and_consumes_none() {
    let (_sluice, mut c) = start().await;
    let export = descriptor(&[("api_key", "k3"), ("path", "/export")]);
    let per_key = descriptor(&[("api_key", "k3")]);
    // Use up the export limit (5 per hour) alone.
    let r = ask(&mut c, request(vec![export.clone()], 5)).await;
    assert_eq!(r.overall_code, OK);
    for _ in 0..3 {
        let r = ask(&mut c, request(vec![per_key.clone(), export.clone()], 0)).await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!(r.statuses.len(), 2);
        assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
    }
    // The per-key limit (60 per minute) was not charged by the refusals.
    let r = ask(&mut c, request(vec![per_key], 0)).await;
    assert_eq!(r.statuses[0].limit_remaining, 59);
}

#[tokio::test]
async fn one_descriptor_repeated_past_its_burst_is_refused_and_charged_nothing() {
    let (_sluice, mut c) = start().await;
    let export = || descriptor(&[("api_key", "k5"), ("path", "/export")]);
    // 3 and 3 on one counter (5 an hour): each fits, together they never
    // can. (The service before the engine admitted this, uncharged, on
    // every call: the store's refusal of the pair read as "no decision".)
    for _ in 0..3 {
        let r = ask(&mut c, request(vec![export(), export()], 3)).await;
        assert_eq!(r.overall_code, OVER, "{r:?}");
        assert_eq!((r.statuses[0].code, r.statuses[1].code), (OVER, OVER));
    }
    let r = ask(&mut c, request(vec![export()], 5)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
}

#[tokio::test]
async fn a_descriptor_beyond_its_burst_refuses_the_request_and_the_others_stay_unchanged() {
    let (_sluice, mut c) = start().await;
    let per_key = || descriptor(&[("api_key", "k6")]);
    let export = || descriptor(&[("api_key", "k6"), ("path", "/export")]);
    // 6 hits on export (5 an hour) can never pass: refused, nothing
    // charged, no retry time; per-key (60 a minute) shows its state.
    let r = ask(&mut c, request(vec![per_key(), export()], 6)).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(
        (r.statuses[0].code, r.statuses[0].limit_remaining),
        (OK, 60)
    );
    assert_eq!(r.statuses[1].code, OVER);
    assert_eq!(header(&r, "Retry-After"), None);
    let r = ask(&mut c, request(vec![per_key()], 1)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 59));
}

#[tokio::test]
async fn matching_unlimited_unknown_prefix_and_shadow() {
    let (_sluice, mut c) = start().await;
    let name = |r: &RateLimitResponse| r.statuses[0].current_limit.as_ref().map(|l| l.name.clone());
    let r = ask(
        &mut c,
        request(vec![descriptor(&[("api_key", "premium-acme")])], 0),
    )
    .await;
    assert_eq!(name(&r).as_deref(), Some("premium"));
    let r = ask(
        &mut c,
        request(vec![descriptor(&[("api_key", "internal-monitoring")])], 0),
    )
    .await;
    assert_eq!((r.overall_code, name(&r)), (OK, None), "unlimited");
    let r = ask(&mut c, request(vec![descriptor(&[("nothing", "here")])], 0)).await;
    assert_eq!((r.overall_code, name(&r)), (OK, None), "unmatched");
    let r = ask(&mut c, request(vec![descriptor(&[("api_key", "k4")])], 0)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 59));
    // Shadow mode: counted, never refused (1 per second).
    let ua = || request(vec![descriptor(&[("user_agent", "curl")])], 5);
    let r = ask(&mut c, ua()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].code, OK);
    // Counted: one hit of another client takes its one token (a shadow
    // descriptor that counted nothing would still show 1).
    let one = request(vec![descriptor(&[("user_agent", "wget")])], 1);
    let r = ask(&mut c, one.clone()).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
    let r = ask(&mut c, one).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    let r = ask(&mut c, request(vec![descriptor(&[("domain", "other")])], 0)).await;
    assert_eq!(r.overall_code, OK);
}

#[tokio::test]
async fn the_health_service_reports_serving() {
    let (sluice, _c) = start().await;
    let channel = Channel::from_shared(format!("http://{}", sluice.grpc.unwrap()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    let r = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.ratelimit.v3.RateLimitService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        r.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// Hits known when a stream ends (Envoy's `apply_on_stream_done`) are
/// recorded, not decided: the descriptor the stream-done action marks with
/// a `sluice_record` entry meets the same limit as the request's, is never
/// refused, and puts the key into debt, up to one burst; the next request
/// is refused until the debt is paid off.
#[tokio::test]
async fn hits_recorded_when_a_stream_ends_go_into_debt() {
    let (_sluice, mut c) = start().await;
    let d = || descriptor(&[("api_key", "k9"), ("path", "/export")]);
    let r = ask(&mut c, request(vec![d()], 1)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 4));
    // The stream used 10: 4 were left, 5 more are debt (one burst of the
    // 5/hour limit), 1 is beyond.
    let done = descriptor(&[
        ("sluice_record", "stream_done"),
        ("api_key", "k9"),
        ("path", "/export"),
    ]);
    let r = ask(&mut c, request(vec![done.clone()], 10)).await;
    assert_eq!(r.overall_code, OK, "a record is never refused");
    assert_eq!(r.statuses[0].code, OK);
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let refused = ask(&mut c, request(vec![d()], 1)).await;
    assert_eq!(refused.overall_code, OVER, "in debt");
    // A record is recorded whatever the state: the key stays refused.
    assert_eq!(ask(&mut c, request(vec![done], 1)).await.overall_code, OK);
    assert_eq!(ask(&mut c, request(vec![d()], 1)).await.overall_code, OVER);
    // Another key is untouched.
    let other = descriptor(&[("api_key", "k10"), ("path", "/export")]);
    assert_eq!(ask(&mut c, request(vec![other], 1)).await.overall_code, OK);
}
