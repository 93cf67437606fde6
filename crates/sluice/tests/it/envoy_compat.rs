//! `[envoy]` switches, over the real gRPC API: `compat` (answer as
//! envoyproxy/ratelimit does), `response_headers`,
//! `response_dynamic_metadata`, `merge_domains`, and the reference server's
//! per-request limits and `quota_mode`, on both answering modes, on the
//! memory store and on Redis.

use std::path::PathBuf;

use crate::common::{Sluice, TempConfig};
use crate::envoy_rls::descriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use envoy_types::pb::google::protobuf::value::Kind;
use sluice_testkit::RedisServer;
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

type Client = RateLimitServiceClient<Channel>;

const YAML: &str = r#"
domain: compat
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: named
    rate_limit: {unit: hour, requests_per_unit: 3, name: my_limit}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: meta
    metadata: {team: payments, tier: {level: 2}}
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: stats
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: detailed
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: closed
    rate_limit: {unit: hour, requests_per_unit: 0}
  - key: quota_shadowed
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: quota_closed
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 0}
"#;

/// What a started Sluice needs kept: itself, its YAML file, and its Redis.
type Kept = (Sluice, TempConfig, Option<RedisServer>);

/// Sluice on [`YAML`] with these extra `[envoy]` lines, on a Redis of its
/// own with `redis`.
async fn start(label: &str, extra: &str, redis: bool) -> (Kept, Client) {
    let yaml = TempConfig::new(&format!("{label}-yaml"), YAML);
    let server = redis.then(RedisServer::start);
    let store = server
        .as_ref()
        // A generous timeout: on a busy machine no call may fall back.
        .map(|r| format!("[store]\nurl = \"{}\"\ntimeout = \"2s\"\n", r.url()))
        .unwrap_or_default();
    let toml = format!(
        "{store}[envoy]\nconfig = \"{}\"\ngrpc_listen = \"127.0.0.1:0\"\n{extra}\n",
        yaml.path().display()
    );
    let sluice = Sluice::start_with(label, &toml);
    let client = sluice.rls_client().await;
    ((sluice, yaml, server), client)
}

/// Each test, on the memory store and on Redis (when installed).
macro_rules! on_every_store {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(false).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $test() {
                    if sluice_testkit::require_redis() {
                        super::$test(true).await;
                    }
                }
            )*
        }
    };
}

on_every_store!(
    compat_names_limits_as_the_files_do_and_adds_no_headers,
    compat_response_headers_are_the_reference_server_s,
    compat_keeps_counting_the_others_when_one_is_over,
    a_per_request_limit_beats_the_config_s,
    quota_mode_refuses_only_when_every_quota_descriptor_is_over,
    a_request_refused_by_its_quotas_consumes_nothing,
    a_shadowed_quota_rule_takes_no_part_in_the_vote,
    quotas_of_zero_refuse_before_anything_is_charged,
    a_request_refused_by_its_quotas_says_when_to_retry,
    dynamic_metadata_carries_the_request_and_the_passing_rules_metadata,
    per_rule_statistics_count_as_the_reference_server_s,
    statistics_of_a_request_refused_by_a_limit_of_0_count_from_its_state,
    negative_hits_give_quota_back_never_past_the_limit,
);

async fn ask(
    c: &mut Client,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: domain.into(),
        descriptors,
        hits_addend: 0,
    };
    c.should_rate_limit(req).await.unwrap().into_inner()
}

fn d(key: &str, value: &str) -> RateLimitDescriptor {
    descriptor(&[(key, value)])
}

fn name(r: &RateLimitResponse, i: usize) -> &str {
    &r.statuses[i].current_limit.as_ref().expect("a limit").name
}

/// A descriptor of these entries with its own `hits_addend`.
fn with_hits(key: &str, value: &str, hits: u64) -> RateLimitDescriptor {
    let mut x = d(key, value);
    x.hits_addend = Some(UInt64Value { value: hits });
    x
}

/// Sluice's `/metrics`, and its samples when the Python parsers are
/// installed.
async fn metrics(s: &Sluice) -> (String, Option<Vec<serde_json::Value>>) {
    let url = format!("http://{}/metrics", s.control);
    let reply = crate::common::send(crate::common::client().get(url)).await;
    let text = String::from_utf8_lossy(&reply.body).into_owned();
    let samples = crate::common::prom::parse(&text);
    (text, samples)
}

fn header<'a>(r: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key == key)
        .map(|h| h.value.as_str())
}

async fn compat_names_limits_as_the_files_do_and_adds_no_headers(redis: bool) {
    let (_s, mut sluice) = start("own", "", redis).await;
    let (_c, mut compat) = start("compat", "compat = true", redis).await;
    // Sluice names an unnamed limit by its place; the reference server
    // leaves `name` empty (config_impl.go: `Name: descriptorConfig.RateLimit.Name`).
    let r = ask(
        &mut sluice,
        "compat",
        vec![d("user", "u1"), d("named", "u1")],
    )
    .await;
    assert_eq!((name(&r, 0), name(&r, 1)), ("user", "my_limit"));
    assert!(header(&r, "RateLimit-Policy").is_some());
    let r = ask(
        &mut compat,
        "compat",
        vec![d("user", "u1"), d("named", "u1")],
    )
    .await;
    assert_eq!((name(&r, 0), name(&r, 1)), ("", "my_limit"));
    // LIMIT_RESPONSE_HEADERS_ENABLED is false by default (settings.go).
    assert!(r.response_headers_to_add.is_empty(), "{r:?}");
    // The reset is the end of the unit's clock-aligned window
    // (utils.CalculateReset).
    let reset = r.statuses[0].duration_until_reset.unwrap();
    assert!(
        reset.seconds > 0 && reset.seconds <= 3600 && reset.nanos == 0,
        "{reset:?}"
    );
}

async fn compat_response_headers_are_the_reference_server_s(redis: bool) {
    let (_c, mut c) = start(
        "compat-headers",
        "compat = true\nresponse_headers = true",
        redis,
    )
    .await;
    let r = ask(&mut c, "compat", vec![d("named", "h1"), d("user", "h1")]).await;
    // The descriptor nearest its limit: user (2 per hour, 1 left).
    assert_eq!(header(&r, "RateLimit-Limit"), Some("2"));
    assert_eq!(header(&r, "RateLimit-Remaining"), Some("1"));
    let reset: u64 = header(&r, "RateLimit-Reset").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&reset));
    assert!(header(&r, "RateLimit-Policy").is_none());
}

/// `d(key, value)` giving `hits` back (`None`: the request's hits).
fn refund(key: &str, value: &str, hits: Option<u64>) -> RateLimitDescriptor {
    let mut x = d(key, value);
    x.hits_addend = hits.map(|value| UInt64Value { value });
    x.is_negative_hits = true;
    x
}

async fn negative_hits_give_quota_back_never_past_the_limit(redis: bool) {
    for extra in ["", "compat = true"] {
        let (_s, mut c) = start("refund", extra, redis).await;
        for _ in 0..2 {
            ask(&mut c, "compat", vec![d("user", "r")]).await;
        }
        let r = ask(&mut c, "compat", vec![d("user", "r")]).await;
        assert_eq!(r.overall_code, OVER, "{extra}");
        // envoy.extensions.common.ratelimit.v3.RateLimitDescriptor: "If
        // true, the hits_addend value will be treated as negative,
        // effectively adding to the rate limit budget instead of consuming
        // from it. This can be used to refill previously consumed rate
        // limit tokens." The reference server does not read the field (its
        // `utils.GetHitsAddends` takes `hits_addend` as a charge whatever
        // `is_negative_hits` says), so this follows Envoy's API in both
        // modes.
        let r = ask(&mut c, "compat", vec![refund("user", "r", Some(1))]).await;
        assert_eq!(
            (
                r.overall_code,
                r.statuses[0].code,
                r.statuses[0].limit_remaining
            ),
            (OK, OK, 1),
            "{extra}"
        );
        let r = ask(&mut c, "compat", vec![d("user", "r")]).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
        let r = ask(&mut c, "compat", vec![d("user", "r")]).await;
        assert_eq!(r.overall_code, OVER, "{extra}");
        // The request's hits (0 meaning 1) when the descriptor has none.
        let r = ask(&mut c, "compat", vec![refund("user", "r", None)]).await;
        assert_eq!(r.statuses[0].limit_remaining, 1, "{extra}");
        // More than was charged fills the limit, and no more: the limit of
        // 2 admits 2, not 7.
        let r = ask(&mut c, "compat", vec![refund("user", "r", Some(5))]).await;
        assert_eq!(r.statuses[0].limit_remaining, 2, "{extra}");
        for _ in 0..2 {
            let r = ask(&mut c, "compat", vec![d("user", "r")]).await;
            assert_eq!(r.overall_code, OK, "{extra}");
        }
        let r = ask(&mut c, "compat", vec![d("user", "r")]).await;
        assert_eq!(r.overall_code, OVER, "{extra}");
        // A refund beside an over-limit descriptor is still made: refunds
        // are never refused. (named=r, a limit of 3, is used up first.)
        for _ in 0..3 {
            ask(&mut c, "compat", vec![d("named", "r")]).await;
        }
        let r = ask(
            &mut c,
            "compat",
            vec![refund("named", "r", Some(1)), d("user", "r")],
        )
        .await;
        assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OK), "{extra}");
        let r = ask(&mut c, "compat", vec![d("named", "r")]).await;
        assert_eq!(r.overall_code, OK, "{extra}: the refund was made");
        let r = ask(&mut c, "compat", vec![d("named", "r")]).await;
        assert_eq!(r.overall_code, OVER, "{extra}");
        // Refunds come first: a used-up key given one back in the request
        // that asks for it is admitted.
        let r = ask(
            &mut c,
            "compat",
            vec![d("named", "r"), refund("named", "r", Some(1))],
        )
        .await;
        assert_eq!((r.overall_code, r.statuses[1].code), (OK, OK), "{extra}");
        // A limit of 0 has nothing to give back, and a refund on it refuses
        // nothing: the request's other descriptors decide.
        let r = ask(
            &mut c,
            "compat",
            vec![refund("closed", "r", Some(1)), d("user", "fresh")],
        )
        .await;
        assert_eq!(
            (
                r.overall_code,
                r.statuses[0].code,
                r.statuses[0].limit_remaining
            ),
            (OK, OK, 0),
            "{extra}"
        );
        // A descriptor no rule meets gives nothing back, and answers OK.
        let r = ask(&mut c, "compat", vec![refund("nothing", "r", Some(1))]).await;
        assert!(r.statuses[0].current_limit.is_none(), "{extra}");
        assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK), "{extra}");
    }
}

async fn compat_keeps_counting_the_others_when_one_is_over(redis: bool) {
    let (_s, mut own) = start("own-count", "", redis).await;
    let (_c, mut compat) = start("compat-count", "compat = true", redis).await;
    for c in [&mut own, &mut compat] {
        for _ in 0..2 {
            ask(c, "compat", vec![d("user", "k")]).await;
        }
    }
    // user=k is over; named=k comes with it three times.
    for _ in 0..3 {
        let r = ask(&mut own, "compat", vec![d("user", "k"), d("named", "k")]).await;
        assert_eq!((r.overall_code, r.statuses[1].code), (OVER, OK));
        let r = ask(&mut compat, "compat", vec![d("user", "k"), d("named", "k")]).await;
        assert_eq!((r.overall_code, r.statuses[1].code), (OVER, OK));
    }
    // Sluice's all-or-nothing charged named=k nothing; the reference
    // server's default (STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT false)
    // counted it every time.
    let r = ask(&mut own, "compat", vec![d("named", "k")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 2);
    let r = ask(&mut compat, "compat", vec![d("named", "k")]).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OVER));
    // Those refusals were real: none is logged as shadow mode's. A
    // shadow-mode rule's two refusals are, and once their lines are in
    // the log, they are the only ones.
    for _ in 0..3 {
        ask(&mut compat, "compat", vec![d("shadowed", "x")]).await;
    }
    let lines = || _c.0.log().matches("would have been limited").count();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while lines() < 2 {
        assert!(std::time::Instant::now() < deadline, "{}", _c.0.log());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(lines(), 2, "{}", _c.0.log());
}

async fn a_per_request_limit_beats_the_config_s(redis: bool) {
    for extra in ["", "compat = true"] {
        let (kept, mut c) = start("override", extra, redis).await;
        let with_limit = || {
            let mut x = d("user", "o1");
            x.limit = Some(RateLimitOverride {
                requests_per_unit: 1,
                unit: 3,
            });
            x
        };
        // config_impl.go GetLimit: `descriptor.GetLimit() != nil` makes a
        // new limit of the request's numbers.
        let r = ask(&mut c, "compat", vec![with_limit()]).await;
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (r.overall_code, limit.requests_per_unit, limit.unit),
            (OK, 1, 3)
        );
        let r = ask(&mut c, "compat", vec![with_limit()]).await;
        assert_eq!(r.overall_code, OVER, "{extra}");
        // The config's own limit is another counter.
        let r = ask(&mut c, "compat", vec![d("user", "o1")]).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
        // An unknown domain has no limit, even with an override.
        let r = ask(&mut c, "nowhere", vec![with_limit()]).await;
        assert!(r.statuses[0].current_limit.is_none());
        // An override of no known unit is ignored, and counted: the
        // config's limit (2 an hour) applies.
        let mut unknown = d("user", "o2");
        unknown.limit = Some(RateLimitOverride {
            requests_per_unit: 9,
            unit: 0,
        });
        let r = ask(&mut c, "compat", vec![unknown]).await;
        assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
        if let (text, Some(samples)) = metrics(&kept.0).await {
            assert_eq!(
                crate::common::prom::value(&samples, "sluice_envoy_overrides_ignored_total", &[]),
                Some(1.0),
                "{extra}: {text}"
            );
        }
    }
}

/// A request refused because its every quota descriptor is over consumes
/// nothing: its enforced descriptor's count is given back. Before, it was
/// charged (with `compat`, as the reference server, it still is).
async fn a_request_refused_by_its_quotas_consumes_nothing(redis: bool) {
    let (_s, mut c) = start("quota-nothing", "", redis).await;
    let both = || vec![d("named", "k"), d("quota_a", "q")];
    let r = ask(&mut c, "compat", both()).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    let r = ask(&mut c, "compat", both()).await;
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (OVER, OK, OVER)
    );
    assert_eq!(r.statuses[0].limit_remaining, 2, "given back");
    let r = ask(&mut c, "compat", vec![d("named", "k")]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 1));
}

/// A quota-mode rule in shadow mode only shadows: it takes no part in the
/// quota vote, for the engine as for the answer. Before, the engine
/// refused (and gave back the enforced count) while the answer said `OK`:
/// the request passed uncounted.
async fn a_shadowed_quota_rule_takes_no_part_in_the_vote(redis: bool) {
    let (_s, mut c) = start("quota-shadowed", "", redis).await;
    let all = || vec![d("named", "s"), d("quota_a", "s"), d("quota_shadowed", "s")];
    assert_eq!(ask(&mut c, "compat", all()).await.overall_code, OK);
    let r = ask(&mut c, "compat", all()).await;
    assert_eq!((r.overall_code, r.statuses[1].code), (OVER, OVER));
    let r = ask(&mut c, "compat", vec![d("named", "s")]).await;
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "the refusal was not counted"
    );
}

/// Every quota-mode descriptor on a limit of 0: refused before anything
/// is charged. Before, the enforced descriptor beside it was charged.
async fn quotas_of_zero_refuse_before_anything_is_charged(redis: bool) {
    let (_s, mut c) = start("quota-closed", "", redis).await;
    let r = ask(
        &mut c,
        "compat",
        vec![d("named", "z"), d("quota_closed", "z")],
    )
    .await;
    assert_eq!(r.overall_code, OVER);
    let r = ask(&mut c, "compat", vec![d("named", "z")]).await;
    assert_eq!(r.statuses[0].limit_remaining, 2, "nothing was charged");
}

async fn a_request_refused_by_its_quotas_says_when_to_retry(redis: bool) {
    let (_s, mut c) = start("quota-retry", "response_headers = true", redis).await;
    let quotas = || vec![d("quota_a", "r"), d("quota_b", "r")];
    let r = ask(&mut c, "compat", quotas()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(header(&r, "Retry-After"), None);
    // Both quotas (1 an hour) are used up: refused, and told when the
    // first of them has room again (within the hour).
    let r = ask(&mut c, "compat", quotas()).await;
    assert_eq!(r.overall_code, OVER, "{r:?}");
    let retry: u64 = header(&r, "Retry-After")
        .expect("a retry time")
        .parse()
        .unwrap();
    assert!((1..=3600).contains(&retry), "{retry}");
    // A limit of 0 never admits: no retry time, beside a quota or alone.
    let r = ask(&mut c, "compat", vec![d("closed", "r"), d("quota_a", "z")]).await;
    assert_eq!((r.overall_code, header(&r, "Retry-After")), (OVER, None));
    let r = ask(&mut c, "compat", vec![d("quota_closed", "r")]).await;
    assert_eq!((r.overall_code, header(&r, "Retry-After")), (OVER, None));
}

async fn quota_mode_refuses_only_when_every_quota_descriptor_is_over(redis: bool) {
    for extra in ["", "compat = true"] {
        let (_s, mut c) = start("quota", extra, redis).await;
        // service/ratelimit.go: OVER_LIMIT "iff at least one rate limit
        // descriptor is over the limit or all quota descriptors are over".
        let r = ask(&mut c, "compat", vec![d("quota_a", "q")]).await;
        assert_eq!(r.overall_code, OK, "{extra}");
        let r = ask(&mut c, "compat", vec![d("quota_a", "q"), d("quota_b", "q")]).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].code, r.statuses[1].code),
            (OK, OVER, OK),
            "{extra}"
        );
        let r = ask(&mut c, "compat", vec![d("quota_a", "q"), d("quota_b", "q")]).await;
        assert_eq!(
            (r.overall_code, r.statuses[0].code, r.statuses[1].code),
            (OVER, OVER, OVER),
            "{extra}"
        );
    }
}

async fn dynamic_metadata_carries_the_request_and_the_passing_rules_metadata(redis: bool) {
    let (_s, mut c) = start("metadata", "response_dynamic_metadata = true", redis).await;
    let r = ask(&mut c, "compat", vec![d("meta", "m"), d("user", "m")]).await;
    let m = r.dynamic_metadata.expect("dynamic metadata");
    let field = |name: &str| m.fields.get(name).and_then(|v| v.kind.clone());
    assert_eq!(field("domain"), Some(Kind::StringValue("compat".into())));
    let Some(Kind::ListValue(list)) = field("descriptors") else {
        panic!("{m:?}")
    };
    assert_eq!(list.values.len(), 2);
    let Some(Kind::StructValue(meta)) = field("metadata") else {
        panic!("{m:?}")
    };
    assert_eq!(
        meta.fields.get("team").and_then(|v| v.kind.clone()),
        Some(Kind::StringValue("payments".into()))
    );
    // Off by default.
    let (_s2, mut plain) = start("no-metadata", "", redis).await;
    let r = ask(&mut plain, "compat", vec![d("meta", "m")]).await;
    assert!(r.dynamic_metadata.is_none());
}

#[tokio::test]
async fn merge_domains_joins_files_of_one_domain() {
    let dir = std::env::temp_dir().join(format!("sluice-it-{}-merge", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let one =
        "domain: m\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 4}\n";
    let two =
        "domain: m\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 6}\n";
    std::fs::write(dir.join("one.yaml"), one).unwrap();
    std::fs::write(dir.join("two.yaml"), two).unwrap();
    let toml = |extra: &str| {
        format!(
            "[envoy]\nconfig = \"{}\"\ngrpc_listen = \"127.0.0.1:0\"\n{extra}\n",
            dir.display()
        )
    };
    // Refused without it, at the second file's `domain`.
    let bad = TempConfig::new("merge-off", &toml(""));
    let out = std::process::Command::new(crate::common::sluice_binary())
        .args(["validate", "--config"])
        .arg(bad.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    let two_path: PathBuf = dir.join("two.yaml");
    assert!(
        err.contains(&format!(
            "{}:1:1: `domain`: duplicate domain `m`",
            two_path.display()
        )),
        "{err}"
    );
    let s = Sluice::start_with("merge-on", &toml("merge_domains = true"));
    let mut c = RateLimitServiceClient::connect(format!("http://{}", s.grpc.unwrap()))
        .await
        .unwrap();
    let r = ask(&mut c, "m", vec![d("a", "x"), d("b", "x")]).await;
    let limits: Vec<u32> = r
        .statuses
        .iter()
        .map(|s| s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit))
        .collect();
    assert_eq!(limits, [4, 6]);
    let _ = std::fs::remove_dir_all(&dir);
}

async fn statistics_of_a_request_refused_by_a_limit_of_0_count_from_its_state(redis: bool) {
    let ((s, _y, _r), mut c) = start("stats-zero", "", redis).await;
    // 8 of 10 used (near at 8); then a request refused by a limit of 0
    // charges nothing, and its hit on `stats` counts from 8: past the
    // near-limit mark (before, it was read as charged: from 7).
    ask(&mut c, "compat", vec![with_hits("stats", "z", 8)]).await;
    let r = ask(
        &mut c,
        "compat",
        vec![with_hits("stats", "z", 1), d("closed", "z")],
    )
    .await;
    assert_eq!(r.overall_code, OVER);
    let (text, samples) = metrics(&s).await;
    let Some(samples) = samples else {
        return;
    };
    let v = |name: &str| {
        crate::common::prom::value(&samples, name, &[("domain", "compat"), ("rule", "stats")])
    };
    assert_eq!(v("sluice_envoy_total_hits_total"), Some(9.0), "{text}");
    assert_eq!(v("sluice_envoy_near_limit_total"), Some(1.0), "{text}");
    // Nothing was charged: 2 still fit.
    let r = ask(&mut c, "compat", vec![with_hits("stats", "z", 2)]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
}

async fn per_rule_statistics_count_as_the_reference_server_s(redis: bool) {
    let ((s, _y, _r), mut c) = start("stats", "", redis).await;
    // base_limiter.go, limit 10, near at 8: 7 hits within, then 2 (one near),
    // then 3 (two over, one near).
    for hits in [7, 2, 3] {
        ask(&mut c, "compat", vec![with_hits("stats", "s1", hits)]).await;
    }
    // A refund is not a hit: it counts in none of them.
    ask(&mut c, "compat", vec![refund("stats", "s1", Some(4))]).await;
    // With detailed_metric, each value is a series of its own.
    ask(&mut c, "compat", vec![d("detailed", "v1")]).await;
    ask(&mut c, "compat", vec![d("detailed", "v2")]).await;
    for _ in 0..3 {
        ask(&mut c, "compat", vec![d("shadowed", "x")]).await;
    }
    // A shadow-mode rule's refusals are logged as shadow mode's.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !s.log().contains("would have been limited") {
        assert!(std::time::Instant::now() < deadline, "{}", s.log());
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (text, samples) = metrics(&s).await;
    let Some(samples) = samples else {
        return;
    };
    let v = |name: &str, rule: &str| {
        crate::common::prom::value(&samples, name, &[("domain", "compat"), ("rule", rule)])
    };
    assert_eq!(
        v("sluice_envoy_total_hits_total", "stats"),
        Some(12.0),
        "{text}"
    );
    assert_eq!(v("sluice_envoy_within_limit_total", "stats"), Some(9.0));
    assert_eq!(v("sluice_envoy_near_limit_total", "stats"), Some(2.0));
    assert_eq!(v("sluice_envoy_over_limit_total", "stats"), Some(2.0));
    assert_eq!(v("sluice_envoy_total_hits_total", "detailed_v1"), Some(1.0));
    assert_eq!(v("sluice_envoy_total_hits_total", "detailed_v2"), Some(1.0));
    assert_eq!(v("sluice_envoy_total_hits_total", "detailed"), None);
    // Shadow mode: 2 of 3 over the limit of 1, let through.
    assert_eq!(v("sluice_envoy_shadow_mode_total", "shadowed"), Some(2.0));
    assert_eq!(v("sluice_envoy_over_limit_total", "shadowed"), Some(2.0));
}
