//! Issue 5's policy features on a manual clock: matches on path globs,
//! hosts and headers; `bucket = "shared"` rules; carry-over of used quota
//! on a plan change; `on_limit = "delay"` with its bounds; keys files and
//! saved runtime assignments.

#![allow(clippy::unwrap_used)]

use crate::DecideHere;
use std::path::PathBuf;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::{Clock, ManualClock};
use sluice_policy::{Engine, PlanSource, Policy, RequestInfo, Verdict};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

const SECOND: u64 = 1_000_000_000;

fn engine_of(policy: Policy) -> Engine<ManualClock> {
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"features"))
}

fn engine(toml: &str) -> Engine<ManualClock> {
    engine_of(Policy::from_toml("features.toml", toml).unwrap())
}

fn error(toml: &str) -> String {
    Policy::from_toml("features.toml", toml)
        .unwrap_err()
        .to_string()
}

struct Req<'a> {
    method: Method,
    path: &'a str,
    headers: HeaderMap,
}

fn req<'a>(key: &str, method: Method, path: &'a str, extra: &[(&'static str, &str)]) -> Req<'a> {
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", key.parse().unwrap());
    for (name, value) in extra {
        headers.insert(*name, value.parse().unwrap());
    }
    Req {
        method,
        path,
        headers,
    }
}

fn decide(e: &Engine<ManualClock>, r: &Req<'_>) -> Verdict {
    e.decide_here(&RequestInfo {
        method: &r.method,
        path: r.path,
        headers: &r.headers,
        peer: None,
        cost: None,
        body: None,
    })
    .unwrap()
}

fn get(e: &Engine<ManualClock>, key: &str, path: &str) -> Verdict {
    decide(e, &req(key, Method::GET, path, &[]))
}

fn names(v: &Verdict) -> Vec<&str> {
    v.results.iter().map(|r| r.name()).collect()
}

fn remaining(v: &Verdict, name: &str) -> u64 {
    v.results
        .iter()
        .find(|r| r.name() == name)
        .unwrap()
        .decision
        .remaining
}

#[test]
fn limits_match_on_globs_hosts_and_headers() {
    let e = engine(
        r#"
        [[limits]]
        name = "export"
        key = "header:X-Api-Key"
        match = { path = "/v1/*/export" }
        rate = "1/min"
        [[limits]]
        name = "deep"
        key = "header:X-Api-Key"
        match = { methods = ["post"], path = "/files/**" }
        rate = "1/min"
        [[limits]]
        name = "tenant-hosts"
        key = "header:X-Api-Key"
        match = { host = "*.example.com" }
        rate = "1/min"
        [[limits]]
        name = "batch"
        key = "header:X-Api-Key"
        match = { header = { name = "X-Tier", value = "batch" } }
        rate = "1/min"
        [[limits]]
        name = "debug"
        key = "header:X-Api-Key"
        match = { header = { name = "X-Debug" } }
        rate = "1/min"
        "#,
    );
    assert_eq!(names(&get(&e, "a", "/v1/users/export")), ["export"]);
    assert!(names(&get(&e, "a", "/v1/export")).is_empty());
    assert!(names(&get(&e, "a", "/v1/a/b/export")).is_empty());
    assert_eq!(
        names(&decide(&e, &req("a", Method::POST, "/files/a/b/c", &[]))),
        ["deep"]
    );
    assert!(
        names(&get(&e, "a", "/files/a")).is_empty(),
        "GET is not POST"
    );
    let host = req("a", Method::GET, "/", &[("host", "t1.example.com:8080")]);
    assert_eq!(names(&decide(&e, &host)), ["tenant-hosts"]);
    let apex = req("a", Method::GET, "/", &[("host", "example.com")]);
    assert!(names(&decide(&e, &apex)).is_empty());
    let batch = req("a", Method::GET, "/", &[("x-tier", "batch")]);
    assert_eq!(names(&decide(&e, &batch)), ["batch"]);
    let interactive = req("a", Method::GET, "/", &[("x-tier", "interactive")]);
    assert!(names(&decide(&e, &interactive)).is_empty());
    let debug = req("a", Method::GET, "/", &[("x-debug", "1")]);
    assert_eq!(names(&decide(&e, &debug)), ["debug"]);
    // The endpoint label describes every condition.
    let labels: Vec<String> = e
        .policy()
        .limits()
        .iter()
        .map(|l| l.limit.labels.endpoint.to_string())
        .collect();
    assert_eq!(
        labels,
        [
            "/v1/*/export",
            "POST /files/**",
            "host=*.example.com",
            "header=x-tier:batch",
            "header=x-debug"
        ]
    );
}

#[test]
fn match_errors_name_the_line_and_the_field() {
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmatch = { path = \"v1/*\" }\n",
    );
    assert!(e.starts_with("features.toml:5:9: "), "{e}");
    assert!(e.contains("match.path `v1/*` must start with `/`"), "{e}");
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmatch = { host = \"a.com:80\" }\n",
    );
    assert!(
        e.contains("features.toml:5:9: limit `a`: match.host"),
        "{e}"
    );
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmatch = { header = { name = \"bad name\" } }\n",
    );
    assert!(e.contains("match.header"), "{e}");
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmatch = { header = { nam = \"X\" } }\n",
    );
    assert!(e.contains("features.toml:5:"), "{e}");
}

const SHARED: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [
  { name = "free", rate = "10/min", burst = 10 },
  { name = "free-export", match = { path_prefix = "/export" }, cost = 5, bucket = "shared" },
  { name = "free-reports", match = { path_prefix = "/reports" }, rate = "1/min", burst = 1, bucket = "separate" },
]
"#;

#[test]
fn a_shared_rule_prices_requests_on_the_plan_bucket() {
    let e = engine(SHARED);
    let v = get(&e, "k", "/export/1");
    assert_eq!(names(&v), ["free"], "no counter of its own");
    assert_eq!(
        remaining(&v, "free"),
        5,
        "an export costs 5 of the plan's 10"
    );
    assert_eq!(remaining(&get(&e, "k", "/"), "free"), 4);
    let v = get(&e, "k", "/export/2");
    assert!(!v.allowed, "5 more do not fit in 4");
    assert_eq!(
        remaining(&get(&e, "k", "/"), "free"),
        3,
        "refused, spent nothing"
    );

    // A separate limit has its own bucket, and also draws 1 from the plan's.
    let v = get(&e, "k", "/reports");
    assert_eq!(names(&v), ["free", "free-reports"]);
    assert_eq!(remaining(&v, "free"), 2);
    let v = get(&e, "k", "/reports");
    assert!(!v.allowed);
    assert_eq!(v.violated().next().unwrap().name(), "free-reports");
    assert_eq!(remaining(&get(&e, "k", "/"), "free"), 1);
}

#[test]
fn shared_rule_errors() {
    let e = error(
        "[client]\nkey = \"header:K\"\n[plans.p]\nlimits = [\n  { match = { path_prefix = \"/x\" }, cost = 2, bucket = \"shared\" },\n]\n",
    );
    assert!(e.starts_with("features.toml:5:3: "), "{e}");
    assert!(e.contains("has none"), "{e}");
    let e = error(
        "[client]\nkey = \"header:K\"\n[plans.p]\nlimits = [\n  { rate = \"1/s\", burst = 3 },\n  { match = { path_prefix = \"/x\" }, rate = \"1/s\", bucket = \"shared\" },\n]\n",
    );
    assert!(e.starts_with("features.toml:6:"), "{e}");
    assert!(e.contains("no `rate`"), "{e}");
    let e = error(
        "[client]\nkey = \"header:K\"\n[plans.p]\nlimits = [\n  { rate = \"1/s\", burst = 3 },\n  { match = { path_prefix = \"/x\" }, cost = 4, bucket = \"shared\" },\n]\n",
    );
    assert!(e.contains("cost 4 exceeds the burst 3"), "{e}");
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nbucket = \"shared\"\n");
    assert!(e.starts_with("features.toml:5:10: "), "{e}");
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\n");
    assert!(e.contains("limit `a`: missing field `rate`"), "{e}");
}

const PLANS: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "10/s", burst = 20 }]

[plans.pro]
limits = [{ rate = "100/s", burst = 300 }]
"#;

#[test]
fn a_plan_change_carries_the_used_share_over() {
    let e = engine(PLANS);
    for _ in 0..15 {
        assert!(get(&e, "alice", "/").allowed);
    }
    crate::now(e.set_plan("alice", "pro")).unwrap();
    let v = get(&e, "alice", "/");
    assert_eq!(names(&v), ["pro"]);
    // 75 % of 300 = 225 used, plus this request.
    assert_eq!(remaining(&v, "pro"), 300 - 225 - 1);

    // Back to free: 226/300 used is 75 % (rounded) of 20 = 15, which the free
    // bucket already has: nothing more is charged, nothing refunded.
    assert!(crate::now(e.clear_plan("alice")).unwrap());
    assert_eq!(remaining(&get(&e, "alice", "/"), "free"), 4);

    // A fresh key starts the new plan fresh.
    crate::now(e.set_plan("bob", "pro")).unwrap();
    assert_eq!(remaining(&get(&e, "bob", "/"), "pro"), 299);
}

#[test]
fn carry_over_reset_starts_fresh() {
    let e = engine(&PLANS.replace(
        "default_plan = \"free\"",
        "default_plan = \"free\"\ncarry_over = \"reset\"",
    ));
    for _ in 0..15 {
        get(&e, "alice", "/");
    }
    crate::now(e.set_plan("alice", "pro")).unwrap();
    assert_eq!(remaining(&get(&e, "alice", "/"), "pro"), 299);
}

const DELAY: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
on_limit = "delay"
max_delay = "2s"
max_queue = 3
limits = [{ algorithm = "gcra", rate = "2/s", burst = 2 }]
"#;

fn delays(e: &Engine<ManualClock>, key: &str, n: usize) -> Vec<Option<u64>> {
    (0..n)
        .map(|_| {
            let v = get(e, key, "/");
            v.allowed.then(|| v.delay())
        })
        .collect()
}

#[test]
fn delay_holds_what_fits_within_max_delay_and_refuses_the_rest() {
    let e = engine(&DELAY.replace("max_queue = 3", "max_queue = 100"));
    // Burst 2 at once; then at 2/s, waits of 0.5 s, 1 s, 1.5 s, 2 s; then 429.
    let got = delays(&e, "k", 8);
    let half = SECOND / 2;
    assert_eq!(
        got,
        [
            Some(0),
            Some(0),
            Some(half),
            Some(2 * half),
            Some(3 * half),
            Some(4 * half),
            None,
            None
        ]
    );
    let v = get(&e, "k", "/");
    let r = &v.results[0];
    assert_eq!(
        (r.decision.limit, r.decision.remaining),
        (2, 0),
        "shown as burst 2"
    );
    assert!(v.retry_after().unwrap() <= half, "{:?}", v.retry_after());
    // Half a second later, one more fits (at the back of the queue).
    e.clock().advance(half);
    assert_eq!(delays(&e, "k", 2), [Some(4 * half), None]);
}

#[test]
fn a_full_delay_queue_refuses_without_charging() {
    let e = engine(DELAY);
    // Two pass at once, three wait (the queue holds 3), the rest are
    // refused although they would fit within max_delay.
    let half = SECOND / 2;
    let got = delays(&e, "k", 6);
    assert_eq!(
        got,
        [
            Some(0),
            Some(0),
            Some(half),
            Some(2 * half),
            Some(3 * half),
            None
        ]
    );
    // The queue is per limit, not per key: another key is refused too,
    // except what fits its burst at once.
    assert_eq!(delays(&e, "other", 3), [Some(0), Some(0), None]);
    let v = get(&e, "other", "/");
    assert!(v.retry_after().unwrap() <= half);
    // The first waiter leaves the queue after its delay: one slot frees.
    e.clock().advance(half);
    let got = delays(&e, "k", 2);
    // k's bucket refilled one during the half second; refused requests
    // were not charged, so the next waits behind the three held ones.
    assert_eq!(got, [Some(3 * half), None]);
}

#[test]
fn delay_errors() {
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\non_limit = \"delay\"\n");
    assert!(e.starts_with("features.toml:5:12: "), "{e}");
    assert!(e.contains("needs max_delay"), "{e}");
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nalgorithm = \"fixed_window\"\nrate = \"1/s\"\non_limit = \"delay\"\nmax_delay = \"1s\"\n",
    );
    assert!(e.contains("token_bucket or gcra"), "{e}");
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/min\"\non_limit = \"delay\"\nmax_delay = \"1s\"\n",
    );
    assert!(e.starts_with("features.toml:6:13: "), "{e}");
    assert!(e.contains("shorter than one request's interval"), "{e}");
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmax_queue = 3\n");
    assert!(e.contains("need on_limit = \"delay\""), "{e}");
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\non_limit = \"later\"\n");
    assert!(e.starts_with("features.toml:5:12: "), "{e}");
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let dir = std::env::temp_dir().join(format!(
            "sluice-features-{label}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn keys_files_assign_plans_and_locate_errors() {
    let dir = TempDir::new("keys");
    for (name, text) in [
        ("keys.csv", "key,plan\nalice,pro\n# a comment\ncarol,free\n"),
        ("keys.toml", "alice = \"pro\"\ncarol = \"free\"\n"),
    ] {
        dir.write(name, text);
        let config = dir.write(
            "sluice.toml",
            &format!("{PLANS}\n[keys]\ncarol = \"pro\"\n")
                .replace("[client]\n", &format!("[client]\nkeys_file = \"{name}\"\n")),
        );
        let policy = Policy::load(&config).unwrap();
        assert_eq!(policy.plan_of("alice"), Some("pro"), "{name}");
        assert_eq!(
            policy.plan_of("carol"),
            Some("free"),
            "{name}: the file beats [keys]"
        );
        assert_eq!(policy.plan_of("dave"), Some("free"));
    }
    dir.write("keys.csv", "alice,pro\nbob,platinum\n");
    let config = dir.write(
        "sluice.toml",
        &PLANS.replace("[client]\n", "[client]\nkeys_file = \"keys.csv\"\n"),
    );
    let e = Policy::load(&config).unwrap_err();
    assert_eq!(e.file, dir.0.join("keys.csv"));
    assert_eq!((e.line, e.column), (2, 5));
    assert!(e.message.contains("no plan named `platinum`"), "{e}");

    std::fs::remove_file(dir.0.join("keys.csv")).unwrap();
    let e = Policy::load(&config).unwrap_err();
    assert_eq!(e.file, config);
    assert_eq!((e.line, e.column), (3, 13), "{e}");
    assert!(e.message.starts_with("client.keys_file: "), "{e}");
}

#[test]
fn runtime_assignments_are_saved_and_loaded_at_start() {
    let dir = TempDir::new("runtime");
    let config = dir.write(
        "sluice.toml",
        &PLANS.replace(
            "[client]\n",
            "[client]\nruntime_keys_file = \"state/runtime-keys.toml\"\n",
        ),
    );
    std::fs::create_dir_all(dir.0.join("state")).unwrap();
    let e = engine_of(Policy::load(&config).unwrap());
    assert!(e.runtime_assignments().is_empty(), "no file yet: none");
    crate::now(e.set_plan("alice", "pro")).unwrap();
    crate::now(e.set_plan("key \"with\" quotes", "pro")).unwrap();
    let (path, n) = e.save_runtime_assignments().unwrap();
    assert_eq!((path, n), (dir.0.join("state/runtime-keys.toml"), 2));

    let restarted = engine_of(Policy::load(&config).unwrap());
    assert_eq!(
        restarted.plan_of("alice"),
        Some(("pro".to_owned(), PlanSource::Runtime))
    );
    assert_eq!(restarted.runtime_assignments(), e.runtime_assignments());

    let plain = engine(PLANS);
    assert!(
        plain.save_runtime_assignments().is_err(),
        "no file configured"
    );
    assert_eq!(plain.clock().now(), 1 << 50);
}

#[test]
fn the_documented_batch_example_holds() {
    // docs/policies.md, "At the limit: reject or delay".
    let e = engine(
        r#"
        [client]
        key = "header:X-Api-Key"
        default_plan = "batch"
        [plans.batch]
        on_limit = "delay"
        max_delay = "500ms"
        max_queue = 100
        limits = [{ algorithm = "gcra", rate = "20/s", burst = 10 }]
        "#,
    );
    let got = delays(&e, "k", 25);
    let ms = 1_000_000;
    let mut want: Vec<Option<u64>> = vec![Some(0); 10];
    want.extend((1..=10).map(|n| Some(n * 50 * ms)));
    want.extend([None; 5]);
    assert_eq!(got, want);
}

#[test]
fn the_plans_example_loads_its_keys_file() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let policy = Policy::load(&root.join("plans.toml")).unwrap();
    assert_eq!(policy.plan_of("demo-batch-key"), Some("batch"));
    assert_eq!(policy.plan_of("demo-pro-key"), Some("pro"));
    assert_eq!(policy.cost_rules("free").len(), 1);
}

const CLASSES: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "1000/h", burst = 1000 }]

[plans.pro]
limits = [{ rate = "1000/h", burst = 1000 }]

[keys]
p1 = "pro"

[[limits]]
name = "backend"
key = "global"
rate = "10/h"
burst = 10
max_share = { free = 80 }
"#;

/// A class refused at its share of a fixed window waits for the window's
/// reset, as a refusal by the window itself would: not for the rate's
/// refill of the missing quota.
#[test]
fn a_class_refused_on_a_fixed_window_waits_for_its_reset() {
    let e = engine(
        &CLASSES
            .replace(
                "rate = \"10/h\"",
                "algorithm = \"fixed_window\"\nrate = \"10/min\"",
            )
            .replace("{ free = 80 }", "{ free = 50 }"),
    );
    // Start at a window's start (windows are aligned to the clock).
    let minute = 60 * SECOND;
    let into = e.clock().now() % minute;
    e.clock().advance(minute - into);
    for _ in 0..5 {
        assert!(get(&e, "f1", "/").allowed);
    }
    let free = get(&e, "f1", "/");
    assert!(!free.allowed);
    for _ in 0..5 {
        assert!(get(&e, "p1", "/").allowed);
    }
    let pro = get(&e, "p1", "/");
    assert!(!pro.allowed, "the window is full");
    assert_eq!(free.retry_after(), Some(minute));
    assert_eq!(free.retry_after(), pro.retry_after());
    e.clock().advance(minute);
    assert!(get(&e, "f1", "/").allowed, "a new window");
}

/// A request that costs more than its class may ever use of a limit is
/// an error (it can never pass), not a refusal with a time to wait.
#[test]
fn a_cost_beyond_the_class_share_can_never_pass() {
    let e = engine(CLASSES);
    let (method, headers) = (Method::GET, {
        let mut h = HeaderMap::new();
        h.insert("x-api-key", "f1".parse().unwrap());
        h
    });
    let decide_cost = |cost| {
        e.decide_here(&RequestInfo {
            method: &method,
            path: "/",
            headers: &headers,
            peer: None,
            cost: Some(cost),
            body: None,
        })
    };
    let err = decide_cost(9).unwrap_err();
    assert!(
        err.to_string().contains("cost 9 exceeds its capacity of 8"),
        "{err}"
    );
    assert!(decide_cost(8).unwrap().allowed, "the whole share, once");
}

#[test]
fn a_class_uses_at_most_its_share_of_a_global_bucket() {
    let e = engine(CLASSES);
    // Free keys, together, get 80 % of the backend's 10.
    let mut free_admitted = 0;
    for n in 0..12 {
        let v = get(&e, &format!("f{}", n % 3), "/");
        if v.allowed {
            free_admitted += 1;
            // A free key sees what its class may still use.
            assert_eq!(remaining(&v, "backend"), 8 - free_admitted);
        } else {
            assert_eq!(v.violated().next().unwrap().name(), "backend");
            assert!(v.retry_after().is_some());
        }
    }
    assert_eq!(free_admitted, 8);
    // The refused ones spent nothing: pro still has the last 2.
    assert!(get(&e, "p1", "/").allowed);
    let v = get(&e, "p1", "/");
    assert!(v.allowed);
    assert_eq!(remaining(&v, "backend"), 0);
    assert!(!get(&e, "p1", "/").allowed);

    let err = error(&CLASSES.replace("{ free = 80 }", "{ gold = 80 }"));
    assert!(err.contains("max_share: no plan named `gold`"), "{err}");
    let err = error(&CLASSES.replace("{ free = 80 }", "{ free = 0 }"));
    assert!(err.contains("from 1 to 100"), "{err}");
}

#[test]
fn burst_credits_pay_once_the_plan_bucket_is_empty() {
    let e = engine(
        r#"
        [client]
        key = "header:X-Api-Key"
        default_plan = "free"
        [plans.free]
        limits = [{ rate = "1/h", burst = 2 }]
        [[limits]]
        name = "g"
        key = "global"
        rate = "4/h"
        burst = 4
        "#,
    );
    crate::now(e.grant_credits("k", 5)).unwrap();
    assert_eq!(crate::now(e.credits("k")), 5);
    assert!(get(&e, "k", "/").allowed);
    assert!(get(&e, "k", "/").allowed);
    assert_eq!(
        crate::now(e.credits("k")),
        5,
        "not spent while the bucket has quota"
    );
    let v = get(&e, "k", "/");
    assert!(v.allowed, "paid with a credit");
    assert_eq!((remaining(&v, "free"), remaining(&v, "g")), (0, 1));
    assert_eq!(crate::now(e.credits("k")), 4);
    assert!(get(&e, "k", "/").allowed);
    assert_eq!(crate::now(e.credits("k")), 3);
    // Now the global limit refuses too: credits do not buy past it.
    assert!(!get(&e, "k", "/").allowed);
    assert_eq!(crate::now(e.credits("k")), 3);
    // Another key without credits is refused by its plan as usual.
    assert_eq!(crate::now(e.credits("other")), 0);
    crate::now(e.grant_credits("k", 0)).unwrap();
    assert_eq!(crate::now(e.credits("k")), 0);
}

#[test]
fn a_reload_that_keeps_a_delay_limit_keeps_its_queue() {
    let e = engine(DELAY);
    let half = SECOND / 2;
    assert_eq!(
        delays(&e, "k", 5),
        [Some(0), Some(0), Some(half), Some(2 * half), Some(3 * half)]
    );
    e.replace_policy(Policy::from_toml("features.toml", DELAY).unwrap());
    // Same limit: same counters, same three waiting, so the queue is full.
    assert_eq!(delays(&e, "k", 1), [None]);
    // A changed max_delay is a new limit: fresh counters, empty queue.
    e.replace_policy(
        Policy::from_toml("features.toml", &DELAY.replace("\"2s\"", "\"3s\"")).unwrap(),
    );
    assert_eq!(delays(&e, "k", 3), [Some(0), Some(0), Some(half)]);
}
