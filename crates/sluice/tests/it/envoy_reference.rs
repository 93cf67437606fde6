//! The configuration examples of envoyproxy/ratelimit's README ("Examples",
//! 1 to 11), loaded as a directory (`examples/envoy-reference.toml`) and
//! driven over the real gRPC API, on the memory store and on Redis. Each
//! test cites what the README (or the reference server's code) says the
//! answer is.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{Sluice, example_path};
use crate::envoy_rls::descriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluice_testkit::{RedisServer, require_redis};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

type Client = RateLimitServiceClient<Channel>;

/// A running example: Sluice, and Redis when it is the store.
struct Running {
    _sluice: Sluice,
    _redis: Option<RedisServer>,
}

/// Sluice on the examples, on Redis or in memory; `None` when Redis is
/// wanted and not installed (and not required).
async fn start(on_redis: bool) -> Option<(Running, Client)> {
    let redis = if on_redis {
        if !require_redis() {
            return None;
        }
        Some(RedisServer::start())
    } else {
        None
    };
    let args = ["--grpc-listen", "127.0.0.1:0"];
    let sluice = match &redis {
        None => Sluice::start_args(&example_path("envoy-reference.toml"), &args),
        // The example on Redis, with a generous timeout: on a busy machine
        // no call may fall back.
        Some(r) => {
            let toml = format!(
                "[store]\nurl = \"{}\"\ntimeout = \"2s\"\n\n[envoy]\nconfig = \"{}\"\n",
                r.url(),
                example_path("envoy/reference").display()
            );
            Sluice::start_with_args("envoy-reference-redis", &toml, &args)
        }
    };
    let client = sluice.rls_client().await;
    Some((
        Running {
            _sluice: sluice,
            _redis: redis,
        },
        client,
    ))
}

/// Each example, as a test on the memory store and one on Redis.
macro_rules! on_every_store {
    ($($example:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $example() {
                    let (_run, mut c) = super::start(false).await.expect("memory");
                    super::$example(&mut c).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $example() {
                    let Some((_run, mut c)) = super::start(true).await else { return };
                    super::$example(&mut c).await;
                }
            )*
        }
    };
}

on_every_store!(
    example_1_two_values_of_one_key_each_have_their_limit,
    example_2_nested_lists_and_several_descriptors_in_one_call,
    example_3_key_and_value_beat_key_alone_and_zero_refuses_all,
    example_4_the_depth_of_a_descriptor_must_match_the_nesting,
    example_5_unlimited_answers_ok_with_max_remaining,
    example_6_shadow_mode_never_limits,
    example_7_replaces_drops_the_named_limit,
    example_8_detailed_metric_leaves_limits_as_they_are,
    example_9_wildcards_trailing_middle_and_several,
    example_10_value_to_metric_leaves_limits_as_they_are,
    example_11_share_threshold_makes_matching_values_share_one_counter,
);

/// One call in `domain` with these descriptors (each a list of entries).
async fn ask(
    c: &mut Client,
    domain: &str,
    descriptors: &[&[(&str, &str)]],
    hits: u32,
) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: hits,
    };
    c.should_rate_limit(req).await.unwrap().into_inner()
}

/// The overall code of `n` calls in a row.
async fn codes(c: &mut Client, domain: &str, d: &[(&str, &str)], n: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(ask(c, domain, &[d], 0).await.overall_code);
    }
    out
}

/// Waits, if need be, for a fresh second: a per-second test then runs
/// within one of the reference server's clock-aligned windows.
async fn at_start_of_a_second() {
    let into = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_millis();
    if into > 300 {
        tokio::time::sleep(Duration::from_millis(u64::from(1_010 - into))).await;
    }
}

fn limit_of(r: &RateLimitResponse, i: usize) -> Option<(u32, i32)> {
    r.statuses[i]
        .current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, l.unit))
}

async fn example_1_two_values_of_one_key_each_have_their_limit(c: &mut Client) {
    at_start_of_a_second().await;
    // README: "each of them setup a 500 request per second rate limit".
    let users = [("database", "users")];
    let r = ask(c, "mongo_cps", &[&users], 500).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
    assert_eq!(limit_of(&r, 0), Some((500, 1)));
    assert_eq!(ask(c, "mongo_cps", &[&users], 1).await.overall_code, OVER);
    let other = ask(c, "mongo_cps", &[&[("database", "default")]], 1).await;
    assert_eq!(
        (other.overall_code, other.statuses[0].limit_remaining),
        (OK, 499)
    );
    // No rule for this value: OK, no limit.
    let none = ask(c, "mongo_cps", &[&[("database", "logs")]], 1).await;
    assert_eq!((none.overall_code, limit_of(&none, 0)), (OK, None));
}

async fn example_2_nested_lists_and_several_descriptors_in_one_call(c: &mut Client) {
    // README: ("message_type", "marketing"),("to_number", N) gets 5 a day
    // per number; ("to_number", N) 100 a day; one call with both is "a
    // logical OR of all the individual rate limit decisions".
    let marketing = [("message_type", "marketing"), ("to_number", "2061111111")];
    let number = [("to_number", "2061111111")];
    for left in (0..5).rev() {
        let r = ask(c, "messaging", &[&marketing, &number], 0).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].limit_remaining, left);
        assert_eq!(limit_of(&r, 0), Some((5, 4)));
        assert_eq!(limit_of(&r, 1), Some((100, 4)));
    }
    let r = ask(c, "messaging", &[&marketing, &number], 0).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OVER, OVER, OK)
    );
    // Another number has its own 5.
    let other = [("message_type", "marketing"), ("to_number", "2062222222")];
    assert_eq!(ask(c, "messaging", &[&other], 0).await.overall_code, OK);
}

async fn example_3_key_and_value_beat_key_alone_and_zero_refuses_all(c: &mut Client) {
    at_start_of_a_second().await;
    // README: "key/value is always attempted as a match before just key";
    // 50.0.0.5 is on a limit of 0 ("Black list IP").
    let r = ask(
        c,
        "edge_proxy_per_ip",
        &[&[("remote_address", "50.0.0.5")]],
        0,
    )
    .await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OVER));
    assert_eq!(limit_of(&r, 0), Some((0, 1)));
    assert_eq!(r.statuses[0].limit_remaining, 0);
    let mut all = codes(
        c,
        "edge_proxy_per_ip",
        &[("remote_address", "50.0.0.1")],
        11,
    )
    .await;
    assert_eq!(all.pop(), Some(OVER), "the 11th in a second");
    assert!(all.iter().all(|c| *c == OK), "{all:?}");
    // A blacklisted descriptor refuses the whole call, and charges nothing
    // to the others in it.
    let r = ask(
        c,
        "edge_proxy_per_ip",
        &[
            &[("remote_address", "50.0.0.2")],
            &[("remote_address", "50.0.0.5")],
        ],
        0,
    )
    .await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OVER, OK, OVER)
    );
    let r = ask(
        c,
        "edge_proxy_per_ip",
        &[&[("remote_address", "50.0.0.2")]],
        0,
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 9);
}

async fn example_4_the_depth_of_a_descriptor_must_match_the_nesting(c: &mut Client) {
    // README: a two-entry descriptor does "not match" a one-level rule,
    // and matches the nested one.
    let two = [("key", "value"), ("subkey", "subvalue")];
    let flat = ask(c, "example4", &[&two], 0).await;
    assert_eq!((flat.overall_code, limit_of(&flat, 0)), (OK, None));
    let nested = ask(c, "example4_nested", &[&two], 0).await;
    assert_eq!(limit_of(&nested, 0), Some((300, 1)));
    let one = ask(c, "example4", &[&[("key", "value")]], 0).await;
    assert_eq!(limit_of(&one, 0), Some((300, 1)));
}

async fn example_5_unlimited_answers_ok_with_max_remaining(c: &mut Client) {
    // README: "an OK status code with the LimitRemaining field set to
    // MaxUint32 value".
    for _ in 0..3 {
        let r = ask(c, "internal", &[&[("ldap", "x")]], 1000).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].limit_remaining),
            (OK, u32::MAX)
        );
        assert_eq!(limit_of(&r, 0), None);
    }
    let r = ask(c, "internal", &[&[("azure", "x")]], 0).await;
    assert_eq!(
        (r.statuses[0].limit_remaining, limit_of(&r, 0)),
        (99, Some((100, 2)))
    );
}

async fn example_6_shadow_mode_never_limits(c: &mut Client) {
    at_start_of_a_second().await;
    // README: user-a "would not get rate-limited regardless of the rate";
    // user-b "would be limited to 20 req / sec".
    let a = codes(
        c,
        "example6",
        &[("service", "auth-service"), ("user", "user-a")],
        15,
    )
    .await;
    assert!(a.iter().all(|c| *c == OK), "{a:?}");
    let mut b = codes(
        c,
        "example6",
        &[("service", "auth-service"), ("user", "user-b")],
        21,
    )
    .await;
    assert_eq!(b.pop(), Some(OVER));
    assert!(b.iter().all(|c| *c == OK), "{b:?}");
}

async fn example_7_replaces_drops_the_named_limit(c: &mut Client) {
    at_start_of_a_second().await;
    // README: both descriptors together are limited at 10/s only, and
    // "this will not affect the 5 / sec limit".
    let one = [("key_1", "value_1"), ("user", "bkthomps")];
    let two = [("key_2", "value_2"), ("user", "bkthomps")];
    for _ in 0..10 {
        let r = ask(c, "example7", &[&one, &two], 0).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(limit_of(&r, 0), None, "replaced: not applied");
        assert_eq!(limit_of(&r, 1), Some((10, 1)));
    }
    assert_eq!(
        ask(c, "example7", &[&one, &two], 0).await.overall_code,
        OVER
    );
    let alone = ask(c, "example7", &[&one], 0).await;
    assert_eq!(
        (alone.overall_code, alone.statuses[0].limit_remaining),
        (OK, 4)
    );
}

async fn example_8_detailed_metric_leaves_limits_as_they_are(c: &mut Client) {
    // README: "(key_1, unspecified_value): 10 / sec ... (key_1, value_1):
    // 20" (the file says per minute).
    let r = ask(c, "example8", &[&[("key1", "unspecified_value")]], 0).await;
    assert_eq!(limit_of(&r, 0), Some((10, 2)));
    let r = ask(c, "example8", &[&[("key1", "value1")]], 0).await;
    assert_eq!(limit_of(&r, 0), Some((20, 2)));
}

async fn example_9_wildcards_trailing_middle_and_several(c: &mut Client) {
    // README: "Matches `value1`, `value2`, `valueXYZ`"; "Matches
    // `/api/123/action` ... Does not match `/api/123/other`"; "Matches
    // `/api/v1/resource/123/action`".
    let limited = |r: &RateLimitResponse| limit_of(r, 0) == Some((20, 2));
    for v in ["value1", "value2", "valueXYZ"] {
        assert!(
            limited(&ask(c, "example9", &[&[("key1", v)]], 0).await),
            "{v}"
        );
    }
    assert!(!limited(
        &ask(c, "example9", &[&[("key1", "valu")]], 0).await
    ));
    for (v, expected) in [
        ("/api/123/action", true),
        ("/api/user-id/action", true),
        ("/api/123/other", false),
    ] {
        let r = ask(c, "example9_middle", &[&[("path", v)]], 0).await;
        assert_eq!(limited(&r), expected, "{v}");
    }
    for (v, expected) in [
        ("/api/v1/resource/123/action", true),
        ("/api/v2/resource/456/action", true),
        ("/api/v1/resource/123", false),
    ] {
        let r = ask(c, "example9_multiple", &[&[("route", v)]], 0).await;
        assert_eq!(limited(&r), expected, "{v}");
    }
    // Each value matched by a wildcard without share_threshold counts on
    // its own.
    let r = ask(c, "example9", &[&[("key1", "value1")]], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 18);
    let r = ask(c, "example9", &[&[("key1", "valueNEW")]], 0).await;
    assert_eq!(r.statuses[0].limit_remaining, 19);
}

async fn example_10_value_to_metric_leaves_limits_as_they_are(c: &mut Client) {
    let d = [
        ("route", "api"),
        ("http_method", "GET"),
        ("subject_id", "123"),
    ];
    let r = ask(c, "example10", &[&d], 0).await;
    assert_eq!(
        (limit_of(&r, 0), r.statuses[0].limit_remaining),
        (Some((60, 2)), 59)
    );
    let d = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    let r = ask(c, "example10_wildcard", &[&d], 0).await;
    assert_eq!(limit_of(&r, 0), Some((100, 2)));
}

async fn example_11_share_threshold_makes_matching_values_share_one_counter(c: &mut Client) {
    // README: "If 5 requests are made for `files/a.pdf` and 5 requests for
    // `files/b.csv`, a request for `files/c.txt` will be rate limited";
    // without share_threshold, `files_no_share/b.csv` "will still be
    // allowed" after 10 for `files_no_share/a.pdf`.
    for file in ["files/a.pdf", "files/b.csv"] {
        let r = ask(c, "example11", &[&[("files", file)]], 5).await;
        assert_eq!(r.overall_code, OK, "{file}");
    }
    let r = ask(c, "example11", &[&[("files", "files/c.txt")]], 1).await;
    assert_eq!(r.overall_code, OVER);
    let r = ask(
        c,
        "example11",
        &[&[("files_no_share", "files_no_share/a.pdf")]],
        10,
    )
    .await;
    assert_eq!(r.overall_code, OK);
    let r = ask(
        c,
        "example11",
        &[&[("files_no_share", "files_no_share/b.csv")]],
        1,
    )
    .await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 9));
    // Shared at the first level, counted per method below it.
    let get = [("route", "api/v1"), ("method", "GET")];
    let get2 = [("route", "api/v2"), ("method", "GET")];
    ask(c, "example11_metrics", &[&get], 10).await;
    let r = ask(c, "example11_metrics", &[&get2], 1).await;
    assert_eq!(r.statuses[0].limit_remaining, 49);
}
