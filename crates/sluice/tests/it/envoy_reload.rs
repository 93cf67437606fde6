//! The Envoy YAML configs reload as the TOML config does: a directory of
//! files in the reference server's layout, changed by atomic renames, with
//! counters kept for unchanged rules and a bad file leaving the running
//! rules in force.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::{Sluice, metric};
use crate::envoy_rls::descriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluice_testkit::RedisServer;
use tonic::transport::Channel;

type Client = RateLimitServiceClient<Channel>;

/// A fresh directory under the temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let dir =
            std::env::temp_dir().join(format!("sluice-it-{}-{nanos}-{label}", std::process::id()));
        std::fs::create_dir_all(dir.join("config")).unwrap();
        Self(dir)
    }

    /// Writes `text` to `config/<name>` by renaming a finished file over it.
    fn put(&self, name: &str, text: &str) {
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, self.0.join("config").join(name)).unwrap();
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const A: &str =
    "domain: a\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";
const B: &str =
    "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 7}\n";

async fn start(dir: &TempDir) -> (Sluice, Client) {
    start_on(dir, None).await
}

/// [`start`], on `redis` when given.
async fn start_on(dir: &TempDir, redis: Option<&RedisServer>) -> (Sluice, Client) {
    // The rules count per hour in clock-aligned windows (as the reference
    // server does): a test that crossed the hour would see its counts go.
    crate::common::clear_of_window_edge(3600, 60).await;
    // A generous timeout: on a busy machine no call may fall back.
    let store = redis
        .map(|r| format!("[store]\nurl = \"{}\"\ntimeout = \"2s\"\n", r.url()))
        .unwrap_or_default();
    let toml = format!(
        "{store}[envoy]\nconfig = \"{}\"\ngrpc_listen = \"127.0.0.1:0\"\n",
        dir.path().join("config").display()
    );
    let sluice = Sluice::start_with("envoy-reload", &toml);
    let client = sluice.rls_client().await;
    (sluice, client)
}

async fn ask(c: &mut Client, domain: &str, user: &str) -> RateLimitResponse {
    let req = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![descriptor(&[("user", user)])],
        hits_addend: 0,
    };
    c.should_rate_limit(req).await.unwrap().into_inner()
}

/// What a descriptor of `domain` shows: its limit and what remains.
async fn shown(c: &mut Client, domain: &str, user: &str) -> Option<(u32, u32)> {
    let r = ask(c, domain, user).await;
    let s = &r.statuses[0];
    s.current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, s.limit_remaining))
}

/// Waits until `domain` has a limit (the reload took effect).
async fn until_limited(s: &Sluice, c: &mut Client, domain: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while shown(c, domain, "probe").await.is_none() {
        assert!(
            Instant::now() < deadline,
            "the reload never took effect; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reloads counted in `/metrics`, by `result`.
async fn reloads(s: &Sluice, result: &str) -> Option<f64> {
    metric(s, "sluice_config_reloads_total", &[("result", result)]).await
}

#[tokio::test]
async fn a_new_file_is_loaded_and_unchanged_rules_keep_their_counters() {
    new_file_and_kept_counters(None).await;
}

/// The same on Redis: the counters of unchanged rules live in Redis, under
/// the same names across the reload.
#[tokio::test]
async fn on_redis_unchanged_rules_keep_their_counters_across_a_reload() {
    if sluice_testkit::require_redis() {
        let redis = RedisServer::start();
        new_file_and_kept_counters(Some(&redis)).await;
        let keys = crate::envoy_rls_redis::redis_keys(&redis);
        assert!(
            keys.iter().any(|k| k.starts_with("sluice:")),
            "the counters were not in Redis: {keys:?}"
        );
    }
}

async fn new_file_and_kept_counters(redis: Option<&RedisServer>) {
    let dir = TempDir::new(if redis.is_some() { "add-redis" } else { "add" });
    dir.put("a.yaml", A);
    let (s, mut c) = start_on(&dir, redis).await;
    assert_eq!(shown(&mut c, "a", "alice").await, Some((5, 4)));
    assert_eq!(shown(&mut c, "b", "alice").await, None, "no domain b yet");
    dir.put("b.yaml", B);
    until_limited(&s, &mut c, "b").await;
    // Domain a's rule did not change: alice's count goes on.
    assert_eq!(shown(&mut c, "a", "alice").await, Some((5, 3)));
    assert_eq!(shown(&mut c, "b", "alice").await, Some((7, 6)));
    // A changed rate is a new counter.
    dir.put("a.yaml", &A.replace("5}", "9}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = shown(&mut c, "a", "bob").await;
        if now.is_some_and(|(rpu, _)| rpu == 9) {
            break;
        }
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown(&mut c, "a", "alice").await, Some((9, 8)));
    // Both reloads count in the reload metric, as a TOML reload does.
    assert!(
        reloads(&s, "success").await >= Some(2.0),
        "log:\n{}",
        s.log()
    );
    assert_eq!(reloads(&s, "failure").await, Some(0.0));
}

#[tokio::test]
async fn a_bad_file_keeps_the_running_rules_and_names_its_place() {
    let dir = TempDir::new("bad");
    dir.put("a.yaml", A);
    let (s, mut c) = start(&dir).await;
    assert_eq!(shown(&mut c, "a", "alice").await, Some((5, 4)));
    // Refused as the reference server refuses it: a unit beside unlimited.
    dir.put(
        "b.yaml",
        "domain: b\ndescriptors:\n  - key: user\n    rate_limit: {unlimited: true, unit: hour}\n",
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.log().contains("envoy config reload failed") {
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = s.log();
    assert!(
        log.contains("b.yaml:4:35: `descriptors[0].rate_limit.unit`: should not specify rate limit unit when unlimited"),
        "{log}"
    );
    assert_eq!(
        shown(&mut c, "a", "alice").await,
        Some((5, 3)),
        "still serving, counters kept"
    );
    assert_eq!(shown(&mut c, "b", "alice").await, None);
    // Counted, once.
    assert_eq!(reloads(&s, "failure").await, Some(1.0));
    assert_eq!(reloads(&s, "success").await, Some(0.0));
    // Two files defining one domain are refused too.
    dir.put("b.yaml", A);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.log().contains("duplicate domain `a`") {
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(shown(&mut c, "a", "alice").await, Some((5, 2)));
    // A directory emptied (files moved away during a deploy) would switch
    // every limit off: refused.
    std::fs::remove_file(dir.path().join("config").join("b.yaml")).unwrap();
    let a_text = std::fs::read_to_string(dir.path().join("config").join("a.yaml")).unwrap();
    std::fs::remove_file(dir.path().join("config").join("a.yaml")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !s.log().contains("the configs define no domain") {
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        shown(&mut c, "a", "alice").await,
        Some((5, 1)),
        "still limited"
    );
    dir.put("a.yaml", &a_text);
    // Fixed, it loads.
    dir.put("b.yaml", B);
    until_limited(&s, &mut c, "b").await;
    assert_eq!(shown(&mut c, "a", "alice").await, Some((5, 0)));
}
