//! The Envoy Rate Limit Service on the shared store: two `sluice serve`
//! processes on one Redis enforce one limit (exactly), with the statuses,
//! `hits_addend`, shadow mode, `unlimited` and `replaces` as in memory; no
//! raw descriptor value reaches Redis; and with Redis killed, the fallback
//! answers at once and Redis decides again once it is back.
//!
//! The limits are per day, so that no clock-aligned window boundary falls
//! inside a test (except at midnight UTC). No timing assertions: the bounds
//! are hang guards far above the store timeout.

use crate::common;

use std::time::{Duration, Instant};

use crate::envoy_rls::{descriptor, request};
use common::{Sluice, TempConfig};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;
use sluice_testkit::{RedisCluster, RedisServer, require_redis};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const DAY: i32 = 4;
const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "envoy-redis-test-secret");

/// Far above the store timeout of the fallback tests (20 ms), far below a
/// connect timeout or a dead Redis's TCP timeouts.
const HANG_GUARD: Duration = Duration::from_millis(1500);

const YAML: &str = r#"
domain: edge_proxy
descriptors:
  - key: api_key
    rate_limit: { unit: day, requests_per_unit: 60 }
    descriptors:
      - key: path
        value: /export
        rate_limit: { name: export, unit: day, requests_per_unit: 5 }
  - key: api_key
    value: internal-*
    rate_limit: { unlimited: true }
  - key: user_agent
    shadow_mode: true
    rate_limit: { unit: day, requests_per_unit: 1 }
  - key: tenant
    rate_limit: { name: tenant, unit: day, requests_per_unit: 3 }
  - key: tenant_vip
    rate_limit:
      name: vip
      unit: day
      requests_per_unit: 100
      replaces: [{ name: tenant }]
"#;

/// The descriptor YAML and a TOML config naming it, on the Redis store with
/// `store` extra `[store]` settings.
struct Config {
    _yaml: TempConfig,
    toml: TempConfig,
}

fn config(label: &str, store: &str) -> Config {
    config_with(label, store, "")
}

/// [`config`] with more lines in the `[envoy]` table.
fn config_with(label: &str, store: &str, envoy: &str) -> Config {
    // TempConfig names its files `.toml`; the YAML loader reads any name.
    let yaml = TempConfig::new(&format!("{label}-descriptors"), YAML);
    let toml = format!(
        "listen = \"127.0.0.1:0\"\ncontrol_listen = \"127.0.0.1:0\"\n\n[store]\nurl = \"memory://\"\n{store}\n\n[envoy]\nconfig = {:?}\ngrpc_listen = \"127.0.0.1:0\"\nalgorithm = \"fixed_window\"\n{envoy}\n",
        yaml.path().display().to_string()
    );
    Config {
        toml: TempConfig::new(label, &toml),
        _yaml: yaml,
    }
}

async fn start(redis: &RedisServer, config: &Config) -> (Sluice, RateLimitServiceClient<Channel>) {
    start_on(&redis.url(), config).await
}

/// [`start`] on the store at `url` (one Redis, or a Cluster).
async fn start_on(url: &str, config: &Config) -> (Sluice, RateLimitServiceClient<Channel>) {
    let sluice = Sluice::start_env(
        config.toml.path(),
        &["--store-url", url, "--grpc-listen", "127.0.0.1:0"],
        &[SECRET],
    );
    let client = sluice.rls_client().await;
    (sluice, client)
}

/// Asks once, and checks the answer did not hang.
async fn ask(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> RateLimitResponse {
    let started = Instant::now();
    let reply = tokio::time::timeout(Duration::from_secs(30), c.should_rate_limit(r))
        .await
        .expect("an answer within 30 s")
        .unwrap()
        .into_inner();
    let took = started.elapsed();
    assert!(took < HANG_GUARD * 10, "a call waited {took:?}");
    reply
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// Every key name in Redis (`KEYS *`, fine for a test-sized database).
pub(crate) fn redis_keys(redis: &RedisServer) -> Vec<String> {
    let raw = redis.command(&["KEYS", "*"]).unwrap();
    raw.lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

/// A generous store timeout: on a busy test machine no call may fall back,
/// or the count would not be exact.
const GENEROUS: &str = "timeout = \"2s\"";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_admit_exactly_one_global_limit() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("rls-redis-global", GENEROUS);
    let (_a, ca) = start(&redis, &cfg).await;
    let (_b, cb) = start(&redis, &cfg).await;
    let raw = "raw-secret-api-key-7f3a";
    let export = || {
        request(
            vec![descriptor(&[("api_key", raw), ("path", "/export")])],
            0,
        )
    };

    // 24 concurrent calls, half through each instance, on a limit of 5.
    let calls: Vec<_> = (0..24)
        .map(|i| {
            let mut c = if i % 2 == 0 { ca.clone() } else { cb.clone() };
            let r = export();
            tokio::spawn(async move { ask(&mut c, r).await })
        })
        .collect();
    let mut remaining_ok = Vec::new();
    let mut over = 0;
    for call in calls {
        let r = call.await.unwrap();
        assert_eq!(header(&r, "Sluice-Fallback"), None, "Redis decided: {r:?}");
        assert_eq!(r.statuses.len(), 1);
        let s = &r.statuses[0];
        let limit = s.current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("export", 5, DAY)
        );
        let reset = s.duration_until_reset.unwrap();
        assert!(reset.seconds > 0 && reset.seconds <= 86_400, "{reset:?}");
        assert_eq!(
            header(&r, "RateLimit-Policy"),
            Some("\"export\";q=5;w=86400")
        );
        if r.overall_code == OK {
            assert_eq!(s.code, OK);
            remaining_ok.push(s.limit_remaining);
            assert!(header(&r, "Retry-After").is_none());
        } else {
            assert_eq!((r.overall_code, s.code, s.limit_remaining), (OVER, OVER, 0));
            assert!(header(&r, "Retry-After").unwrap().parse::<u64>().unwrap() >= 1);
            over += 1;
        }
    }
    remaining_ok.sort_unstable();
    assert_eq!(
        remaining_ok,
        [0, 1, 2, 3, 4],
        "exactly the limit, once each"
    );
    assert_eq!(over, 19);

    // The counters are named by keyed hashes: no descriptor key or value,
    // and no limit name, in any Redis key name.
    let keys = redis_keys(&redis);
    assert!(!keys.is_empty());
    for k in &keys {
        assert!(k.starts_with("sluice:{"), "{k}");
        for raw_part in [raw, "api_key", "/export", "export", "edge_proxy"] {
            assert!(!k.contains(raw_part), "`{raw_part}` reached Redis: {k}");
        }
    }
}

#[tokio::test]
async fn hits_addend_all_or_nothing_shadow_unlimited_and_replaces_across_instances() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("rls-redis-features", GENEROUS);
    let (_a, mut a) = start(&redis, &cfg).await;
    let (_b, mut b) = start(&redis, &cfg).await;
    let export = || descriptor(&[("api_key", "k2"), ("path", "/export")]);
    let per_key = || descriptor(&[("api_key", "k2")]);

    // The request's hits_addend, through A.
    let r = ask(&mut a, request(vec![export()], 3)).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 2));
    assert_eq!(header(&r, "Sluice-Fallback"), None);
    // A descriptor's own hits_addend overrides the request's, through B:
    // 3 do not fit in the 2 left (A's hits are seen).
    let mut three = export();
    three.hits_addend = Some(UInt64Value { value: 3 });
    let r = ask(&mut b, request(vec![per_key(), three], 1)).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
    // The refusal charged neither descriptor: 2 still fit, and the per-key
    // limit is untouched until now.
    let r = ask(&mut b, request(vec![per_key(), export()], 2)).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        (r.statuses[0].limit_remaining, r.statuses[1].limit_remaining),
        (58, 0)
    );
    let r = ask(&mut a, request(vec![export()], 1)).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OVER, OVER));

    // Unlimited: OK, no current_limit, whatever the hits.
    let r = ask(
        &mut a,
        request(vec![descriptor(&[("api_key", "internal-probe")])], 1000),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert!(r.statuses[0].current_limit.is_none());

    // Shadow mode (1 a day): counted in Redis, never refused.
    for i in 0..3 {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        let r = ask(c, request(vec![descriptor(&[("user_agent", "curl")])], 1)).await;
        assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK));
    }

    // `replaces`: with the vip limit, the tenant limit (3) does not apply.
    let both = || {
        request(
            vec![
                descriptor(&[("tenant", "t1")]),
                descriptor(&[("tenant_vip", "t1")]),
            ],
            1,
        )
    };
    for i in 0..5u32 {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        let r = ask(c, both()).await;
        assert_eq!(r.overall_code, OK, "call {i}: {r:?}");
        assert!(r.statuses[0].current_limit.is_none(), "tenant replaced");
        assert_eq!(r.statuses[1].limit_remaining, 99 - i);
    }
    // Alone, the tenant limit applies, shared: 3 through either instance.
    for i in 0..4 {
        let c = if i % 2 == 0 { &mut a } else { &mut b };
        let r = ask(c, request(vec![descriptor(&[("tenant", "t1")])], 1)).await;
        assert_eq!(r.overall_code == OK, i < 3, "call {i}: {r:?}");
    }
}

/// Polls until `done(answer)`, or panics after `within` (a hang guard).
async fn until(
    c: &mut RateLimitServiceClient<Channel>,
    r: impl Fn() -> RateLimitRequest,
    within: Duration,
    done: impl Fn(&RateLimitResponse) -> bool,
) -> RateLimitResponse {
    let started = Instant::now();
    loop {
        let t = Instant::now();
        let answer = ask(c, r()).await;
        assert!(t.elapsed() < HANG_GUARD, "a call waited {:?}", t.elapsed());
        if done(&answer) {
            return answer;
        }
        assert!(
            started.elapsed() < within,
            "not reached within {within:?}: last answer {answer:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn fallback_store(fallback: &str) -> String {
    format!(
        "timeout = \"20ms\"\nfallback = \"{fallback}\"\nexpected_instances = 2\nbreaker_open = \"200ms\""
    )
}

/// Waits until Redis decides `r` (the first calls, which load the script,
/// may miss the 20 ms timeout on a busy machine), kills it, and waits for
/// the first answer a fallback gave: that answer.
async fn kill_and_fall_back(
    c: &mut RateLimitServiceClient<Channel>,
    redis: &mut RedisServer,
    r: impl Fn() -> RateLimitRequest,
) -> RateLimitResponse {
    until(c, &r, Duration::from_secs(20), |a| {
        a.overall_code == OK && header(a, "Sluice-Fallback").is_none()
    })
    .await;
    redis.kill();
    until(c, &r, Duration::from_secs(10), |a| {
        header(a, "Sluice-Fallback").is_some()
    })
    .await
}

#[tokio::test]
async fn redis_killed_deny_fallback_answers_over_limit_at_once_then_redis_is_back() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let cfg = config("rls-redis-deny", &fallback_store("deny"));
    let (_s, mut c) = start(&redis, &cfg).await;
    let per_key = || request(vec![descriptor(&[("api_key", "k-deny")])], 1);
    let r = kill_and_fall_back(&mut c, &mut redis, per_key).await;
    // Every answer comes at once; the deny fallback refuses with full
    // statuses and says so.
    for _ in 0..20 {
        let t = Instant::now();
        let r = ask(&mut c, per_key()).await;
        assert!(t.elapsed() < HANG_GUARD, "a call waited {:?}", t.elapsed());
        assert_eq!(header(&r, "Sluice-Fallback"), Some("deny"));
        assert_eq!(r.overall_code, OVER);
    }
    assert_eq!(r.overall_code, OVER);
    let s = &r.statuses[0];
    assert_eq!((s.code, s.limit_remaining), (OVER, 0));
    assert_eq!(s.current_limit.as_ref().unwrap().requests_per_unit, 60);
    assert!(s.duration_until_reset.unwrap().seconds >= 1);
    assert!(header(&r, "Retry-After").unwrap().parse::<u64>().unwrap() >= 1);
    // What needs no counter needs no Redis: unlimited and unmatched pass.
    let r = ask(
        &mut c,
        request(vec![descriptor(&[("api_key", "internal-x")])], 1),
    )
    .await;
    assert_eq!((r.overall_code, header(&r, "Sluice-Fallback")), (OK, None));

    // Redis is back (empty): it decides again.
    redis.restart();
    until(&mut c, per_key, Duration::from_secs(20), |r| {
        r.overall_code == OK && header(r, "Sluice-Fallback").is_none()
    })
    .await;
}

/// In `compat` mode every descriptor is decided on its own; when Redis is
/// gone the answer still says who decided (it once lost the header, since
/// no descriptor was decided all or nothing).
#[tokio::test]
async fn compat_answers_say_when_the_fallback_decided() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let cfg = config_with(
        "rls-redis-compat",
        &fallback_store("local"),
        "compat = true",
    );
    let (_s, mut c) = start(&redis, &cfg).await;
    let per_key = || request(vec![descriptor(&[("api_key", "k-compat")])], 1);
    let r = kill_and_fall_back(&mut c, &mut redis, per_key).await;
    assert_eq!(header(&r, "Sluice-Fallback"), Some("local"));
    // The local share (60 a day among 2 instances) admits it.
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK), "{r:?}");
}

#[tokio::test]
async fn redis_killed_local_fallback_admits_a_share_and_marks_it() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let cfg = config("rls-redis-local", &fallback_store("local"));
    let (_s, mut c) = start(&redis, &cfg).await;
    let export = || {
        request(
            vec![descriptor(&[("api_key", "k-local"), ("path", "/export")])],
            1,
        )
    };
    // Warm up on another key: a call the fallback decided here would spend
    // the local share.
    let warm = || request(vec![descriptor(&[("api_key", "k-warm")])], 1);
    until(&mut c, warm, Duration::from_secs(20), |r| {
        header(r, "Sluice-Fallback").is_none()
    })
    .await;
    redis.kill();
    until(&mut c, export, Duration::from_secs(10), |r| {
        header(r, "Sluice-Fallback") == Some("local")
    })
    .await;
    // The local share of 5 among 2 instances is 3; the call that saw the
    // fallback spent one.
    let mut ok = 1;
    for _ in 0..6 {
        let t = Instant::now();
        let r = ask(&mut c, export()).await;
        assert!(t.elapsed() < HANG_GUARD, "a call waited {:?}", t.elapsed());
        assert_eq!(header(&r, "Sluice-Fallback"), Some("local"));
        ok += u32::from(r.overall_code == OK);
    }
    assert_eq!(
        ok, 3,
        "the local fallback admits 5 / 2 instances, rounded up"
    );
}

/// Hits recorded when a stream ends (a descriptor that Envoy's stream-done
/// action marks with `sluice_record`) go into debt on the shared store as
/// in memory, whichever instance records them: on one Redis and on a
/// Cluster, the instance that admitted the request and the other both
/// refuse the key after, and the refusal's time counts the debt.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hits_recorded_after_a_stream_go_into_debt_on_redis_and_on_a_cluster() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    recorded_into_debt("rls-redis-debt", &redis.url()).await;
    drop(redis);
    let cluster = RedisCluster::start(3);
    recorded_into_debt("rls-cluster-debt", &cluster.url()).await;
}

async fn recorded_into_debt(label: &str, url: &str) {
    let cfg = config(label, GENEROUS);
    let (_a, mut a) = start_on(url, &cfg).await;
    let (_b, mut b) = start_on(url, &cfg).await;
    let export = || descriptor(&[("api_key", "debtor"), ("path", "/export")]);
    let r = ask(&mut a, request(vec![export()], 1)).await;
    assert_eq!(
        header(&r, "sluice-fallback"),
        None,
        "{label}: Redis decides"
    );
    assert_eq!(
        (r.overall_code, r.statuses[0].limit_remaining),
        (OK, 4),
        "{label}"
    );
    // The stream used 10, recorded on the other instance: the 4 left, then
    // 5 of debt (one burst of the 5/day limit); 1 is beyond, as excess.
    let done = descriptor(&[
        ("sluice_record", "stream_done"),
        ("api_key", "debtor"),
        ("path", "/export"),
    ]);
    let r = ask(&mut b, request(vec![done], 10)).await;
    assert_eq!(
        header(&r, "sluice-fallback"),
        None,
        "{label}: Redis records"
    );
    assert_eq!(
        (
            r.overall_code,
            r.statuses[0].code,
            r.statuses[0].limit_remaining
        ),
        (OK, OK, 0),
        "{label}: a record is never refused"
    );
    for c in [&mut a, &mut b] {
        let r = ask(c, request(vec![export()], 1)).await;
        assert_eq!(r.overall_code, OVER, "{label}: in debt");
        // A count of 10 in a window of 5: the next day pays off 5 and still
        // leaves no room, so the key passes on the day after. Without the
        // debt it would pass tomorrow (less than a day from now).
        let wait = r.statuses[0].duration_until_reset.unwrap().seconds;
        assert!(wait > 86_400, "{label}: refused for {wait} s");
    }
    let other = descriptor(&[("api_key", "solvent"), ("path", "/export")]);
    let r = ask(&mut a, request(vec![other], 1)).await;
    assert_eq!(r.overall_code, OK, "{label}: another key is untouched");
}
