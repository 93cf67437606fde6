//! Concurrency limits (`max_in_flight`) through the Envoy Rate Limit
//! Service of the real binary, over gRPC: a request-start call takes a
//! slot under a lease of its own, all or nothing with the request's other
//! descriptors, and names the lease in its answer; a stream-done release
//! (`sluice_record` entry carrying the lease, `is_negative_hits`) gives
//! that lease's slot back, once; on Redis, a release reaching another
//! instance than the one that took the slot frees it. A release that never
//! comes (Envoy died, or the call failed) is made good by the lease's end,
//! on a busy key too, and the slots of a killed instance come back one
//! lease later.
//!
//! No timing assertions: the waits are bounded polls.

use crate::common;

use std::time::{Duration, Instant};

use crate::envoy_rls::{descriptor, request};
use common::{Sluice, TempConfig};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{UInt64Value, value::Kind};
use sluice_testkit::{RedisServer, require_redis};
use tonic::transport::Channel;

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;
const SECRET: (&str, &str) = ("SLUICE_KEY_SECRET", "envoy-slots-test-secret");

/// Two uploads in flight per user, leased for `lease`; one tenant call a
/// day.
fn yaml(lease: &str) -> String {
    format!(
        r#"
domain: edge_proxy
descriptors:
  - key: user
    descriptors:
      - key: in_flight
        value: uploads
        rate_limit: {{ max_in_flight: 2, lease: {lease}, name: uploads }}
  - key: tenant
    rate_limit: {{ name: tenant, unit: day, requests_per_unit: 1 }}
"#
    )
}

/// The YAML and a TOML config naming it, on the memory store (the Redis
/// tests pass `--store-url`).
struct Config {
    _yaml: TempConfig,
    toml: TempConfig,
}

fn config(label: &str, lease: &str) -> Config {
    let yaml = TempConfig::new(&format!("{label}-descriptors"), &yaml(lease));
    let toml = format!(
        "listen = \"127.0.0.1:0\"\ncontrol_listen = \"127.0.0.1:0\"\n\n[store]\nurl = \"memory://\"\ntimeout = \"2s\"\n\n[envoy]\nconfig = {:?}\ngrpc_listen = \"127.0.0.1:0\"\n",
        yaml.path().display().to_string()
    );
    Config {
        toml: TempConfig::new(label, &toml),
        _yaml: yaml,
    }
}

/// Sluice on `config` (on Redis with `redis`), and a client of its RLS.
async fn start(
    config: &Config,
    redis: Option<&RedisServer>,
) -> (Sluice, RateLimitServiceClient<Channel>) {
    let url = redis.map(RedisServer::url);
    let mut args = vec!["--grpc-listen", "127.0.0.1:0"];
    if let Some(url) = &url {
        args.extend(["--store-url", url.as_str()]);
    }
    let sluice = Sluice::start_env(config.toml.path(), &args, &[SECRET]);
    let client = sluice.rls_client().await;
    (sluice, client)
}

async fn ask(c: &mut RateLimitServiceClient<Channel>, r: RateLimitRequest) -> RateLimitResponse {
    tokio::time::timeout(Duration::from_secs(30), c.should_rate_limit(r))
        .await
        .expect("an answer within 30 s")
        .unwrap()
        .into_inner()
}

/// The request-start descriptor of `user`'s uploads.
fn upload(user: &str) -> RateLimitDescriptor {
    descriptor(&[("user", user), ("in_flight", "uploads")])
}

/// A request start: costs 1 (`hits_addend` 0 means 1).
fn take(user: &str) -> RateLimitRequest {
    request(vec![upload(user)], 0)
}

/// The stream-done release of `user`'s slot taken under `lease`, as Envoy
/// sends it: marked by the `sluice_record` entry (the value Envoy's
/// `metadata` action read from the answer that took the slot),
/// `is_negative_hits`, `hits_addend` 1.
fn release(user: &str, lease: &str) -> RateLimitRequest {
    let mut d = descriptor(&[
        ("sluice_record", lease),
        ("user", user),
        ("in_flight", "uploads"),
    ]);
    d.is_negative_hits = true;
    d.hits_addend = Some(UInt64Value { value: 1 });
    request(vec![d], 0)
}

/// Takes one of `user`'s slots: the lease its answer names, and what is
/// left.
async fn take_leased(c: &mut RateLimitServiceClient<Channel>, user: &str) -> (String, u32) {
    let r = ask(c, take(user)).await;
    assert_eq!((r.overall_code, r.statuses[0].code), (OK, OK), "{r:?}");
    let lease = taken(&r).expect("the answer names the slot's lease");
    let id: u64 = lease.parse().expect("a lease id");
    assert!(id >= 1 << 52, "a lease id, not a count: {lease}");
    (lease, r.statuses[0].limit_remaining)
}

/// The slots the answer says the `uploads` rule took (its dynamic
/// metadata's `sluice_slots.uploads`).
fn taken(r: &RateLimitResponse) -> Option<String> {
    let slots = r.dynamic_metadata.as_ref()?.fields.get("sluice_slots")?;
    let Some(Kind::StructValue(s)) = &slots.kind else {
        panic!("sluice_slots is not a map: {slots:?}")
    };
    match &s.fields.get("uploads")?.kind {
        Some(Kind::StringValue(n)) => Some(n.clone()),
        other => panic!("not a string: {other:?}"),
    }
}

fn header<'a>(r: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    r.response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// (overall code, the first status's code and `limit_remaining`).
fn codes(r: &RateLimitResponse) -> (i32, i32, u32) {
    (
        r.overall_code,
        r.statuses[0].code,
        r.statuses[0].limit_remaining,
    )
}

#[tokio::test]
async fn slots_are_taken_refused_and_released_on_the_memory_store() {
    let cfg = config("envoy-slots-memory", "60s");
    let (_sluice, mut c) = start(&cfg, None).await;
    let mut leases = Vec::new();
    for left in [1, 0] {
        let r = ask(&mut c, take("u1")).await;
        assert_eq!(codes(&r), (OK, OK, left));
        let limit = r.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("uploads", 2, 0),
            "max_in_flight, per no unit of time"
        );
        assert_eq!(
            header(&r, "RateLimit-Policy"),
            Some("\"uploads\";q=2;qu=\"concurrent-requests\"")
        );
        leases.push(taken(&r).expect("the slot's lease"));
    }
    assert_ne!(leases[0], leases[1], "a lease per request");
    // The third in flight is refused, and takes no slot.
    let r = ask(&mut c, take("u1")).await;
    assert_eq!(codes(&r), (OVER, OVER, 0));
    assert_eq!(taken(&r), None, "no release for a refused request");
    assert!(header(&r, "Retry-After").is_some());
    // Another user has slots of their own.
    assert_eq!(codes(&ask(&mut c, take("u2")).await), (OK, OK, 1));

    // A release frees its slot: never refused, no part of the overall code.
    let r = ask(&mut c, release("u1", &leases[0])).await;
    assert_eq!(codes(&r), (OK, OK, 1));
    assert_eq!(taken(&r), None);
    let (third, left) = take_leased(&mut c, "u1").await;
    assert_eq!(left, 0);
    // A release that comes twice, or names a lease never taken here, frees
    // nothing: never another request's slot.
    for lease in [&leases[0], &leases[0], "4503599627370497"] {
        let r = ask(&mut c, release("u1", lease)).await;
        assert_eq!(codes(&r), (OK, OK, 0), "release of {lease}");
    }
    for (lease, left) in [(&leases[1], 1), (&third, 2), (&third, 2)] {
        assert_eq!(
            codes(&ask(&mut c, release("u1", lease)).await),
            (OK, OK, left)
        );
    }
    for left in [1, 0] {
        assert_eq!(codes(&ask(&mut c, take("u1")).await), (OK, OK, left));
    }
    assert_eq!(ask(&mut c, take("u1")).await.overall_code, OVER);
}

/// A release that never comes: the slot comes back when its lease ends,
/// while the key stays busy with other requests that take and release
/// their own slots (which must not keep the forgotten one alive).
async fn a_forgotten_release_ends_with_its_lease(c: &mut RateLimitServiceClient<Channel>) {
    let (forgotten, left) = take_leased(c, "u9").await;
    assert_eq!(left, 1);
    let taken_at = Instant::now();
    // Busy: one request after another, each released, for two leases.
    while taken_at.elapsed() < Duration::from_secs(2) {
        let (lease, _) = take_leased(c, "u9").await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = ask(c, release("u9", &lease)).await;
        assert_eq!(header(&r, "Sluice-Fallback"), None, "the store decided");
        if r.statuses[0].limit_remaining == 2 {
            break;
        }
    }
    let freed = loop {
        let r = ask(c, take("u9")).await;
        if r.overall_code == OK && r.statuses[0].limit_remaining == 1 {
            break r;
        }
        assert!(
            taken_at.elapsed() < Duration::from_secs(20),
            "the forgotten slot was never given back: {r:?}"
        );
        if r.overall_code == OK {
            let lease = taken(&r).unwrap();
            ask(c, release("u9", &lease)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        taken_at.elapsed() >= Duration::from_secs(1),
        "not before its lease ended"
    );
    // Its release comes at last: it frees nothing (the slot came back by
    // itself), not the slot just taken.
    let r = ask(c, release("u9", &forgotten)).await;
    assert_eq!(codes(&r), (OK, OK, 1));
    drop(freed);
}

#[tokio::test]
async fn a_release_that_never_comes_ends_with_its_lease_on_the_memory_store() {
    let cfg = config("envoy-slots-forgotten", "1s");
    let (_sluice, mut c) = start(&cfg, None).await;
    a_forgotten_release_ends_with_its_lease(&mut c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_that_never_comes_ends_with_its_lease_on_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("envoy-slots-forgotten-redis", "1s");
    let (_sluice, mut c) = start(&cfg, Some(&redis)).await;
    a_forgotten_release_ends_with_its_lease(&mut c).await;
}

#[tokio::test]
async fn a_slot_is_taken_all_or_nothing_with_the_other_descriptors() {
    let cfg = config("envoy-slots-all-or-nothing", "1s");
    let (_sluice, mut c) = start(&cfg, None).await;
    let tenant = || descriptor(&[("tenant", "t")]);
    assert_eq!(
        ask(&mut c, request(vec![tenant()], 0)).await.overall_code,
        OK
    );
    // The tenant's limit refuses the request: the upload takes no slot.
    for _ in 0..3 {
        let r = ask(&mut c, request(vec![upload("u3"), tenant()], 0)).await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
        assert_eq!(taken(&r), None, "no slot taken, no release");
    }
    assert_eq!(codes(&ask(&mut c, take("u3")).await), (OK, OK, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_release_on_another_instance_frees_the_slot() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("envoy-slots-redis", "60s");
    let (_a, mut a) = start(&cfg, Some(&redis)).await;
    let (_b, mut b) = start(&cfg, Some(&redis)).await;
    let mut leases = Vec::new();
    for left in [1, 0] {
        let r = ask(&mut a, take("u1")).await;
        assert_eq!(header(&r, "Sluice-Fallback"), None, "Redis decided");
        assert_eq!(codes(&r), (OK, OK, left));
        leases.push(taken(&r).unwrap());
    }
    assert_eq!(codes(&ask(&mut a, take("u1")).await), (OVER, OVER, 0));
    assert_eq!(codes(&ask(&mut b, take("u1")).await), (OVER, OVER, 0));
    // B took none of the slots: a release reaching it frees A's lease.
    let r = ask(&mut b, release("u1", &leases[0])).await;
    assert_eq!(header(&r, "Sluice-Fallback"), None);
    assert_eq!(codes(&r), (OK, OK, 1));
    let (third, left) = take_leased(&mut a, "u1").await;
    assert_eq!(left, 0);
    assert_eq!(ask(&mut b, take("u1")).await.overall_code, OVER);
    // The same release again, on either instance, frees nothing.
    assert_eq!(
        codes(&ask(&mut a, release("u1", &leases[0])).await),
        (OK, OK, 0)
    );
    assert_eq!(
        codes(&ask(&mut b, release("u1", &leases[0])).await),
        (OK, OK, 0)
    );
    // Both released on B: both free, and no further release goes below.
    for (lease, left) in [(&leases[1], 1), (&third, 2), (&third, 2)] {
        assert_eq!(
            codes(&ask(&mut b, release("u1", lease)).await),
            (OK, OK, left)
        );
    }
    assert_eq!(codes(&ask(&mut b, take("u1")).await), (OK, OK, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_redis_a_killed_instance_s_slots_come_back_after_their_lease() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("envoy-slots-lease", "1s");
    let (a, mut ca) = start(&cfg, Some(&redis)).await;
    let (_b, mut cb) = start(&cfg, Some(&redis)).await;
    for left in [1, 0] {
        assert_eq!(codes(&ask(&mut ca, take("u1")).await), (OK, OK, left));
    }
    // Both leases began before this instant, so both end within a lease
    // of it.
    let both_taken = Instant::now();
    let r = ask(&mut cb, take("u1")).await;
    assert_eq!(header(&r, "Sluice-Fallback"), None, "Redis decided");
    assert_eq!(r.overall_code, OVER, "A holds both slots");
    // A dies before its releases come: its slots come back with their
    // lease, without anyone releasing them.
    drop(ca);
    drop(a);
    let killed = Instant::now();
    let admitted = loop {
        let r = ask(&mut cb, take("u1")).await;
        assert_eq!(header(&r, "Sluice-Fallback"), None);
        if r.overall_code == OK {
            break r;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "the killed instance's slots never came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(admitted.statuses[0].limit_remaining <= 1);
    // The leases were taken one after the other, so they may end one
    // after the other: once both have, the other slot is free too.
    tokio::time::sleep_until((both_taken + Duration::from_millis(1_200)).into()).await;
    assert_eq!(
        codes(&ask(&mut cb, take("u1")).await),
        (OK, OK, 0),
        "both came back"
    );
    assert_eq!(ask(&mut cb, take("u1")).await.overall_code, OVER);
}
