//! Issue 5's policy features through the real binary: glob, host and
//! header matches; shared and separate buckets; keys files and their
//! reload; runtime assignments saved and loaded at start; carry-over of
//! used quota on a plan change; `on_limit = "delay"` and its queue bound.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Reply, Sluice, client, send, sf_item};

const TOKEN: &str = "policy-features-token";

/// A folder of files for one test, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir =
            std::env::temp_dir().join(format!("sluice-it-{label}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The plan names in a reply's `RateLimit-Policy`.
fn names(r: &Reply) -> Vec<String> {
    r.policy().iter().map(|i| i.name.clone()).collect()
}

/// A limit's `r` (remaining) in a reply's `RateLimit`.
fn remaining(r: &Reply, name: &str) -> i64 {
    sf_item(&r.ratelimit(), name).param("r")
}

#[tokio::test]
async fn rules_match_on_globs_hosts_and_headers() {
    let s = Sluice::start_with(
        "matches",
        r#"
[[limits]]
name = "export"
key = "ip"
match = { path = "/v1/*/export" }
rate = "1/h"
[[limits]]
name = "tenants"
key = "ip"
match = { host = "*.example.com" }
rate = "1/h"
[[limits]]
name = "batch"
key = "ip"
match = { methods = ["POST"], header = { name = "X-Tier", value = "batch" } }
rate = "1/h"
"#,
    );
    let c = client();
    let r = send(c.get(s.url("/v1/users/export"))).await;
    assert_eq!((r.status, names(&r)), (200, vec!["export".to_owned()]));
    assert_eq!(send(c.get(s.url("/v1/teams/export"))).await.status, 429);
    let r = send(c.get(s.url("/v1/a/b/export"))).await;
    assert_eq!((r.status, r.has("ratelimit-policy")), (200, false));

    let host = |h: &'static str| c.get(s.url("/")).header("Host", h);
    let r = send(host("t1.example.com")).await;
    assert_eq!(names(&r), ["tenants"]);
    assert_eq!(send(host("t2.example.com:8080")).await.status, 429);
    assert_eq!(
        send(host("example.com")).await.status,
        200,
        "not a subdomain"
    );

    let batch = || c.post(s.url("/jobs")).header("X-Tier", "batch");
    assert_eq!(names(&send(batch()).await), ["batch"]);
    assert_eq!(send(batch()).await.status, 429);
    let r = send(c.post(s.url("/jobs")).header("X-Tier", "interactive")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        send(c.get(s.url("/jobs")).header("X-Tier", "batch"))
            .await
            .status,
        200
    );
}

const PLANS: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [
  { name = "free", rate = "20/h", burst = 20 },
  { name = "free-export", match = { path_prefix = "/export" }, cost = 10, bucket = "shared" },
  { name = "free-reports", match = { path = "/reports/**" }, rate = "1/h", burst = 1, bucket = "separate" },
]

[plans.pro]
limits = [{ name = "pro", rate = "300/h", burst = 300 }]
"#;

#[tokio::test]
async fn shared_rules_draw_on_the_plan_bucket_separate_ones_count_apart() {
    let s = Sluice::start_with("buckets", PLANS);
    let c = client();
    let get = |path: &str| c.get(s.url(path)).header("X-Api-Key", "k");
    let r = send(get("/export/1")).await;
    assert_eq!(
        names(&r),
        ["free"],
        "a shared rule has no counter of its own"
    );
    assert_eq!(
        remaining(&r, "free"),
        10,
        "an export costs 10 of the plan's 20"
    );
    let r = send(get("/reports/2026/q1")).await;
    assert_eq!(names(&r), ["free", "free-reports"]);
    assert_eq!(remaining(&r, "free"), 9);
    let r = send(get("/reports/2026/q2")).await;
    assert_eq!(r.status, 429, "the heavy endpoint's own bucket is empty");
    let r = send(get("/")).await;
    assert_eq!(
        (r.status, remaining(&r, "free")),
        (200, 8),
        "light ones still pass"
    );
    assert_eq!(send(get("/export/2")).await.status, 429, "10 > 8 left");
}

#[tokio::test]
async fn a_plan_change_carries_the_used_share_over() {
    let s = Sluice::start_with_env("carry", PLANS, &[("SLUICE_ADMIN_TOKEN", TOKEN)]);
    let c = client();
    for _ in 0..15 {
        assert_eq!(
            send(c.get(s.url("/")).header("X-Api-Key", "alice"))
                .await
                .status,
            200
        );
    }
    let r = send(
        c.put(s.control_url("/admin/keys/alice/plan"))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    // 15 of 20 is 75 %: alice starts pro with 225 of 300 used.
    let r = send(c.get(s.url("/")).header("X-Api-Key", "alice")).await;
    assert_eq!(names(&r), ["pro"]);
    let left = remaining(&r, "pro");
    assert!((74..=75).contains(&left), "{left}");
}

#[tokio::test]
async fn a_keys_file_assigns_plans_and_reloads_when_it_changes() {
    let dir = TempDir::new("keysfile");
    let keys = dir.write("keys.csv", "key,plan\nalice,pro\n");
    let config = dir.write(
        "sluice.toml",
        &PLANS.replace("[client]\n", "[client]\nkeys_file = \"keys.csv\"\n"),
    );
    let s = Sluice::start(&config);
    let c = client();
    let plan = || async { names(&send(c.get(s.url("/")).header("X-Api-Key", "alice")).await) };
    assert_eq!(plan().await, ["pro"]);

    std::fs::write(&keys, "key,plan\nalice,free\n").unwrap();
    // Polled once a second; this is a hang guard, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(30);
    while plan().await != ["free"] {
        assert!(Instant::now() < deadline, "the keys file was not reloaded");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A bad keys file is refused with its file, line and column; the
    // running config stays.
    std::fs::write(&keys, "key,plan\nalice,pro\nbob,platinum\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s.log().contains("keys.csv:3:5: no plan named `platinum`") {
        assert!(Instant::now() < deadline, "no error logged: {}", s.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(plan().await, ["free"]);

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["validate", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("keys.csv:3:5: no plan named `platinum`"),
        "{stderr}"
    );
    assert!(
        !s.log().contains("alice"),
        "raw keys never appear in the log"
    );
}

#[tokio::test]
async fn runtime_assignments_are_saved_and_survive_a_restart() {
    let dir = TempDir::new("runtime");
    let config = dir.write(
        "sluice.toml",
        &PLANS.replace(
            "[client]\n",
            "[client]\nruntime_keys_file = \"runtime-keys.toml\"\n",
        ),
    );
    let env = [("SLUICE_ADMIN_TOKEN", TOKEN)];
    let c = client();
    {
        let s = Sluice::start_env(&config, &[], &env);
        let r = send(
            c.put(s.control_url("/admin/keys/alice/plan"))
                .bearer_auth(TOKEN)
                .body(r#"{"plan":"pro"}"#),
        )
        .await;
        assert_eq!(r.status, 200);
        let save = || c.post(s.control_url("/admin/keys/save"));
        assert_eq!(send(save()).await.status, 401, "the token is required");
        let r = send(save().bearer_auth(TOKEN)).await;
        assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["saved"], 1);
        assert!(!s.log().contains("alice"));
    }
    let saved = std::fs::read_to_string(dir.path("runtime-keys.toml")).unwrap();
    assert!(saved.contains("alice = \"pro\""), "{saved}");
    let leftovers: Vec<_> = std::fs::read_dir(&dir.0)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "no temporary file is left behind");

    let s = Sluice::start_env(&config, &[], &env);
    let r = send(
        c.get(s.control_url("/admin/keys/alice/plan"))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(
        (r.json()["plan"].as_str(), r.json()["source"].as_str()),
        (Some("pro"), Some("runtime"))
    );
    let r = send(c.get(s.url("/")).header("X-Api-Key", "alice")).await;
    assert_eq!(names(&r), ["pro"]);
}

/// Sends `n` requests at once as key `k`; returns each reply.
async fn burst(s: &Sluice, n: usize) -> Vec<Reply> {
    let c = client();
    let tasks: Vec<_> = (0..n)
        .map(|_| tokio::spawn(send(c.get(s.url("/")).header("X-Api-Key", "k"))))
        .collect();
    let mut replies = Vec::new();
    for t in tasks {
        replies.push(t.await.unwrap());
    }
    replies
}

/// The `delay_ms` of a `/v1/check` answer (the Redis tests use it too).
pub fn delay_ms(r: &Reply) -> u64 {
    r.json()["delay_ms"].as_u64().unwrap_or(0)
}

/// A free plan whose one limit delays (the Redis tests use it too).
pub fn delay_config(max_delay: &str, max_queue: u32) -> String {
    format!(
        r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
on_limit = "delay"
max_delay = "{max_delay}"
max_queue = {max_queue}
limits = [{{ algorithm = "gcra", rate = "1/s", burst = 2 }}]
"#
    )
}

#[tokio::test]
async fn delayed_requests_pass_slower_within_max_delay_and_get_429_beyond() {
    // Burst 2 at once; at 1/s, three more fit within 3 s (waits of 1, 2 and
    // 3 s); the other five would wait longer and are refused.
    let s = Sluice::start_with("delay", &delay_config("3s", 100));
    let replies = burst(&s, 10).await;
    let admitted: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let refused: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!(admitted.len() + refused.len(), 10);
    // One more only if the ten took over a second to decide (a refill).
    assert!((5..=6).contains(&admitted.len()), "{}", admitted.len());
    let delayed = admitted.iter().filter(|r| delay_ms(r) > 0).count();
    assert!(delayed >= 3, "{delayed} were held");
    assert!(admitted.iter().all(|r| delay_ms(r) <= 3000));
    for r in &refused {
        assert!(r.int_header("retry-after") >= 1);
        assert_eq!(r.problem(429)["status"], 429);
    }
}

#[tokio::test]
async fn the_delay_queue_bound_holds() {
    // max_delay is long (30 s) but only 2 may wait at once: 2 pass at once,
    // 2 wait (1 s and 2 s), the other 6 are refused.
    let s = Sluice::start_with("delay-queue", &delay_config("30s", 2));
    let replies = burst(&s, 10).await;
    let admitted = replies.iter().filter(|r| r.status == 200).count();
    let delayed = replies
        .iter()
        .filter(|r| r.status == 200 && delay_ms(r) > 0)
        .count();
    assert_eq!(
        admitted + replies.iter().filter(|r| r.status == 429).count(),
        10
    );
    // One more only if the ten took over a second to decide.
    assert!((4..=5).contains(&admitted), "{admitted}");
    assert!(delayed <= 3, "{delayed}");
    // Once the queue has drained, requests are admitted again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = send(client().get(s.url("/")).header("X-Api-Key", "k")).await;
        if r.status == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "never admitted again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn priority_classes_keep_room_for_higher_plans_under_a_mixed_load() {
    // The same config as the Redis store's test (`redis_policy_parity`).
    let s = Sluice::start_with("classes", crate::redis_policy_parity::CLASSES);
    // 30 free requests and 10 pro ones, interleaved, all at once.
    let c = client();
    let tasks: Vec<_> = (0..40)
        .map(|n| {
            let key = if n % 4 == 3 {
                format!("pro-{}", n % 2 + 1)
            } else {
                format!("free-{}", n % 5)
            };
            let request = c.get(s.url("/")).header("X-Api-Key", key.clone());
            tokio::spawn(async move { (key, send(request).await.status) })
        })
        .collect();
    let (mut free, mut pro) = (0, 0);
    for t in tasks {
        let (key, status) = t.await.unwrap();
        assert!(status == 200 || status == 429, "{status}");
        if status == 200 {
            if key.starts_with("pro") {
                pro += 1;
            } else {
                free += 1;
            }
        }
    }
    assert!(free <= 10, "free used at most 50 % of 20: {free}");
    assert_eq!(pro, 10, "every pro request got through");
}

#[tokio::test]
async fn burst_credits_are_granted_spent_and_shown() {
    let s = Sluice::start_with_env(
        "credits",
        r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "1/h", burst = 2 }]
"#,
        &[("SLUICE_ADMIN_TOKEN", TOKEN)],
    );
    let c = client();
    let url = s.control_url("/admin/keys/alice/credits");
    assert_eq!(send(c.put(&url).body(r#"{"credits":3}"#)).await.status, 401);
    let r = send(c.put(&url).bearer_auth(TOKEN).body(r#"{"credits":3}"#)).await;
    assert_eq!((r.status, r.json()["credits"].as_u64()), (200, Some(3)));
    let r = send(c.put(&url).bearer_auth(TOKEN).body(r#"{"credits":-1}"#)).await;
    assert_eq!(r.status, 400);
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(
            send(c.get(s.url("/")).header("X-Api-Key", "alice"))
                .await
                .status,
        );
    }
    assert_eq!(
        statuses,
        [200, 200, 200, 200, 200, 429],
        "2 from the bucket, 3 on credit"
    );
    let r = send(c.get(&url).bearer_auth(TOKEN)).await;
    assert_eq!(r.json()["credits"], 0);
    assert_eq!(
        send(c.get(s.url("/")).header("X-Api-Key", "bob"))
            .await
            .status,
        200,
        "other keys have their own bucket"
    );
    assert!(!s.log().contains("alice"));
}
