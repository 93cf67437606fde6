//! `sluice envoy-ratelimit`, started as a Deployment of the reference
//! server starts `/bin/ratelimit`: with the reference server's environment
//! variables and nothing else (not even a Sluice config), Redis as its
//! backend and the YAML in its runtime directory. Its three ports answer as
//! the reference server's do: gRPC, `/json` and `/healthcheck`, and the
//! debug port (Sluice's `/metrics`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::RedisServer;
use tonic::transport::Channel;

use crate::common::{Sluice, client, metric, send};
use crate::envoy_rls::descriptor;

type Client = RateLimitServiceClient<Channel>;

/// A runtime directory as the reference server reads it:
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/*.yaml`.
struct Runtime {
    root: PathBuf,
}

impl Runtime {
    fn new(label: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "sluice-envoy-ratelimit-{label}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("ratelimit").join("config")).unwrap();
        Self { root }
    }

    fn put(&self, text: &str) {
        let dir = self.root.join("ratelimit").join("config");
        let tmp = dir.join(".config.yaml.tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join("config.yaml")).unwrap();
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn yaml(per_hour: u32) -> String {
    format!(
        "domain: rl\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: {per_hour}\n"
    )
}

/// The reference server's variables as its Deployments set them, on
/// loopback and ephemeral ports, with `extra` beside them.
fn start(runtime: &Runtime, redis: &RedisServer, extra: &[(&str, &str)]) -> Sluice {
    let root = runtime.root().to_str().unwrap().to_owned();
    let url = redis.url();
    let host_port = url.trim_start_matches("redis://").to_owned();
    let mut env = vec![
        ("RUNTIME_ROOT", root.as_str()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("RUNTIME_WATCH_ROOT", "false"),
        ("RUNTIME_IGNOREDOTFILES", "true"),
        ("USE_STATSD", "false"),
        ("LOG_LEVEL", "info"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_TYPE", "SINGLE"),
        ("REDIS_URL", host_port.as_str()),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
    ];
    env.extend_from_slice(extra);
    Sluice::start_envoy_ratelimit(&env)
}

async fn grpc(s: &Sluice) -> Client {
    s.rls_client().await
}

async fn ask(c: &mut Client, user: &str) -> (i32, u32, u32) {
    let req = RateLimitRequest {
        domain: "rl".into(),
        descriptors: vec![descriptor(&[("user", user)])],
        hits_addend: 0,
    };
    let r = c.should_rate_limit(req).await.unwrap().into_inner();
    let s = &r.statuses[0];
    let limit = s.current_limit.as_ref().map_or(0, |l| l.requests_per_unit);
    (r.overall_code, limit, s.limit_remaining)
}

async fn post_json(s: &Sluice, body: &str) -> crate::common::Reply {
    send(
        client()
            .post(s.url("/json"))
            .header("content-type", "application/json")
            .body(body.to_owned()),
    )
    .await
}

const OK: i32 = 1;
const OVER_LIMIT: i32 = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reference_servers_environment_alone_runs_it_on_its_three_ports() {
    if !sluice_testkit::require_redis() {
        return;
    }
    // The rules count per hour in clock-aligned windows.
    crate::common::clear_of_window_edge(3600, 60).await;
    let redis = RedisServer::start();
    let runtime = Runtime::new("ports");
    runtime.put(&yaml(3));
    let s = start(&runtime, &redis, &[]);

    // gRPC on GRPC_PORT.
    let mut c = grpc(&s).await;
    for left in [2, 1, 0] {
        assert_eq!(ask(&mut c, "alice").await, (OK, 3, left));
    }
    assert_eq!(ask(&mut c, "alice").await.0, OVER_LIMIT);

    // /json on PORT: the reference server's JSON and status codes.
    let request = r#"{"domain":"rl","descriptors":[{"entries":[{"key":"user","value":"bob"}]}]}"#;
    let r = post_json(&s, request).await;
    assert_eq!(r.status, 200, "{}", s.log());
    assert_eq!(r.header("content-type"), "application/json");
    let answer = r.json();
    assert_eq!(answer["overallCode"], "OK", "{answer}");
    let status = &answer["statuses"][0];
    assert_eq!(status["code"], "OK");
    assert_eq!(
        status["currentLimit"],
        serde_json::json!({"requestsPerUnit": 3, "unit": "HOUR"})
    );
    assert_eq!(status["limitRemaining"], 2);
    // The time to the hour's end, as the mapping writes a duration.
    let reset = status["durationUntilReset"].as_str().unwrap_or_default();
    assert!(reset.ends_with('s') && reset.len() > 1, "{answer}");
    let r = post_json(&s, &request.replace("bob", "alice")).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["overallCode"], "OVER_LIMIT");
    // Over 64 KiB, the body is not read.
    let huge = request.replace("bob", &"b".repeat(70 * 1024));
    for bad in [
        "not json",
        r#"{"domain":"rl","descriptors":[],"extra":1}"#,
        r#"{"domain":"","descriptors":[{"entries":[{"key":"user","value":"x"}]}]}"#,
        huge.as_str(),
    ] {
        let r = post_json(&s, bad).await;
        assert_eq!(r.status, 400, "{}", &bad[..bad.len().min(80)]);
        assert_eq!(String::from_utf8_lossy(&r.body), "Bad Request\n");
    }

    // /healthcheck on PORT.
    let r = send(client().get(s.url("/healthcheck"))).await;
    assert_eq!((r.status, &r.body[..]), (200, &b"OK"[..]));

    // The debug port: Sluice's metrics, the reference server's per-rule
    // counters among them.
    let hits = metric(
        &s,
        "sluice_envoy_over_limit_total",
        &[("domain", "rl"), ("rule", "user")],
    )
    .await;
    assert_eq!(hits, Some(2.0), "one refusal over gRPC, one over /json");

    // The counters are in Redis.
    let keys = crate::envoy_rls_redis::redis_keys(&redis);
    assert!(
        keys.iter().any(|k| k.starts_with("sluice:")),
        "the counters were not in Redis: {keys:?}"
    );

    // A new YAML in the runtime directory is loaded, and counted.
    runtime.put(&yaml(5));
    let deadline = Instant::now() + Duration::from_secs(10);
    while ask(&mut c, "carol").await.1 != 5 {
        assert!(Instant::now() < deadline, "never reloaded:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reloads = metric(&s, "sluice_config_reloads_total", &[("result", "success")]).await;
    assert_eq!(reloads, Some(1.0), "{}", s.log());
    // A broken one is refused, and counted too.
    runtime.put("domain: rl\ndescriptors: [");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&s, "sluice_config_reloads_total", &[("result", "failure")]).await != Some(1.0) {
        assert!(Instant::now() < deadline, "never refused:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(ask(&mut c, "carol").await.1, 5, "the running rules stay");
}

/// While Redis is down, `/healthcheck` stays `OK` by default, as the
/// reference server's does once it has connected, and fails with
/// `REDIS_HEALTH_CHECK_ACTIVE_CONNECTION`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_check_follows_redis_only_when_asked_to() {
    if !sluice_testkit::require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let runtime = Runtime::new("health");
    runtime.put(&yaml(1000));
    let plain = start(&runtime, &redis, &[]);
    let active = start(
        &runtime,
        &redis,
        &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true")],
    );
    let health = |s: &Sluice| {
        let url = s.url("/healthcheck");
        async move { send(client().get(url)).await.status }
    };
    assert_eq!(health(&plain).await, 200);
    assert_eq!(health(&active).await, 200);
    redis.kill();
    // Calls find Redis gone (its circuit breaker opens after a few).
    let mut c = grpc(&active).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while health(&active).await != 500 {
        assert!(Instant::now() < deadline, "{}", active.log());
        let _ = ask(&mut c, "dave").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(health(&plain).await, 200);
    // And it recovers.
    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while health(&active).await != 200 {
        assert!(Instant::now() < deadline, "{}", active.log());
        let _ = ask(&mut c, "dave").await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A variable Sluice cannot honour stops the start, named.
#[test]
fn the_reference_servers_default_socket_is_refused_by_name() {
    let out = std::process::Command::new(crate::common::sluice_binary())
        .env_clear()
        .arg("envoy-ratelimit")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("REDIS_SOCKET_TYPE") && err.contains("set REDIS_SOCKET_TYPE=tcp"),
        "{err}"
    );
}

/// Started as `/bin/ratelimit` (a link to the binary, as the image has
/// it), Sluice runs the reference server's mode, whatever the arguments.
#[test]
fn a_link_named_ratelimit_runs_the_reference_servers_mode() {
    let dir = std::env::temp_dir().join(format!("sluice-bin-ratelimit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("ratelimit");
    std::os::unix::fs::symlink(crate::common::sluice_binary(), &link).unwrap();
    let out = std::process::Command::new(&link)
        .env_clear()
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("set REDIS_SOCKET_TYPE=tcp"), "{err}");
}
