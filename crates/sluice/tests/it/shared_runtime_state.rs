//! Runtime plans and burst credits shared through Redis: two `sluice serve`
//! processes on one Redis see each other's admin changes, spend one credit
//! balance, and Redis never holds a raw key.

use crate::common;

use std::time::{Duration, Instant};

use common::{Reply, Sluice, TempConfig, client, example, replace_once, send};
use sluice_testkit::{RedisServer, require_redis};

const TOKEN: &str = "runtime-admin-token";
const ENV: [(&str, &str); 2] = [
    ("SLUICE_KEY_SECRET", "runtime-test-secret"),
    ("SLUICE_ADMIN_TOKEN", TOKEN),
];
/// How long a change may take to show before the test gives up (a hang
/// guard, not a timing assertion: the design target is well under a
/// second).
const PATIENCE: Duration = Duration::from_secs(20);

fn start_on(redis: &RedisServer, config: &TempConfig) -> Sluice {
    Sluice::start_env(config.path(), &["--store-url", &redis.url()], &ENV)
}

/// The quick-start config with a free plan that does not refill during the
/// test (1/hour, burst 20).
fn config(label: &str) -> TempConfig {
    let text = replace_once(
        &example("quickstart.toml"),
        r#"limits = [{ algorithm = "token_bucket", rate = "10/s", burst = 20 }]"#,
        r#"limits = [{ algorithm = "token_bucket", rate = "1/hour", burst = 20 }]"#,
    );
    let text = replace_once(&text, "[store]\n", "[store]\ntimeout = \"2s\"\n");
    TempConfig::new(label, &text)
}

/// Polls `probe` until it returns `Some`, or panics after [`PATIENCE`].
async fn eventually<T, F: Future<Output = Option<T>>>(
    what: &str,
    mut probe: impl FnMut() -> F,
) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "gave up waiting: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The RESP bulk strings of a reply (a simple parser for test-sized
/// replies).
fn bulk_strings(raw: &str) -> Vec<String> {
    raw.lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

/// Everything Redis holds, as text: key names, and the fields and values
/// of every hash.
fn redis_dump(redis: &RedisServer) -> String {
    let keys = bulk_strings(&redis.command(&["KEYS", "*"]).unwrap());
    let mut out = keys.join("\n");
    for k in &keys {
        let kind = redis.command(&["TYPE", k]).unwrap();
        if kind.trim() == "+hash" {
            out.push('\n');
            out.push_str(&redis.command(&["HGETALL", k]).unwrap());
        }
    }
    out
}

fn limits_of(r: &Reply) -> Vec<String> {
    r.policy().iter().map(|i| i.name.clone()).collect()
}

async fn plan_on(s: &Sluice, key: &str) -> (String, String) {
    let r = send(
        client()
            .get(s.control_url(&format!("/admin/keys/{key}/plan")))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(r.status, 200);
    let j = r.json();
    (
        j["plan"].as_str().unwrap().to_owned(),
        j["source"].as_str().unwrap().to_owned(),
    )
}

async fn credits_on(s: &Sluice, key: &str) -> u64 {
    let r = send(
        client()
            .get(s.control_url(&format!("/admin/keys/{key}/credits")))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(r.status, 200);
    r.json()["credits"].as_u64().unwrap()
}

#[tokio::test]
async fn a_plan_assigned_on_one_instance_applies_on_the_other() {
    if !require_redis() {
        return;
    }
    let mut redis = RedisServer::start();
    let config = config("runtime-plans");
    let (a, b) = (start_on(&redis, &config), start_on(&redis, &config));
    let c = client();
    let key = "alice-raw-api-key";
    let through = |s: &Sluice| c.get(s.url("/")).header("X-Api-Key", key);

    assert_eq!(limits_of(&send(through(&b)).await), ["ip-guard", "free"]);

    let r = send(
        c.put(a.control_url(&format!("/admin/keys/{key}/plan")))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));

    // B applies it within a poll.
    eventually("B sees alice on pro", || async {
        (plan_on(&b, key).await == ("pro".into(), "runtime".into())).then_some(())
    })
    .await;
    // More than the free burst (20, and one was spent above) through B.
    for i in 0..30 {
        let r = send(through(&b)).await;
        assert_eq!(r.status, 200, "request {i} through B");
        assert_eq!(limits_of(&r), ["ip-guard", "pro"]);
        assert!(!r.has("sluice-fallback"));
    }

    // Redis holds the assignment under the key id, never the raw key.
    let dump = redis_dump(&redis);
    assert!(dump.contains("sluice:{runtime}:plans"), "{dump}");
    assert!(dump.contains("pro"), "{dump}");
    assert!(!dump.contains("alice"), "a raw key reached Redis:\n{dump}");

    // DELETE on B: A falls back to the config's plan.
    let r = send(
        c.delete(b.control_url(&format!("/admin/keys/{key}/plan")))
            .bearer_auth(TOKEN),
    )
    .await;
    assert_eq!(r.status, 204);
    eventually("A sees alice back on free", || async {
        (plan_on(&a, key).await == ("free".into(), "default".into())).then_some(())
    })
    .await;
    assert_eq!(limits_of(&send(through(&a)).await), ["ip-guard", "free"]);

    // With Redis down, instances keep the last assignments they loaded,
    // and refuse changes they cannot share (nothing changes).
    let r = send(
        c.put(a.control_url("/admin/keys/bob/plan"))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    eventually("B sees bob on pro", || async {
        (plan_on(&b, "bob").await.0 == "pro").then_some(())
    })
    .await;
    redis.kill();
    let r = send(c.get(b.url("/")).header("X-Api-Key", "bob")).await;
    assert_eq!(limits_of(&r), ["ip-guard", "pro"], "the last known plan");
    let r = send(
        c.put(b.control_url("/admin/keys/carol/plan"))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert_eq!(r.status, 503);
    assert_eq!(plan_on(&b, "carol").await.1, "default");
    eventually("B logs the outage", || async {
        b.log()
            .contains("cannot read runtime plans and credits from Redis")
            .then_some(())
    })
    .await;

    for s in [&a, &b] {
        let log = s.log();
        assert!(!log.contains("alice"), "raw keys never appear in the log");
        assert!(!log.contains(TOKEN), "the token never appears in the log");
        assert!(
            log.matches("cannot read runtime plans and credits").count() <= 1,
            "the outage is logged once"
        );
    }
}

#[tokio::test]
async fn credits_granted_on_one_instance_are_spent_through_the_other() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let config = config("runtime-credits");
    let (a, b) = (start_on(&redis, &config), start_on(&redis, &config));
    let c = client();
    let key = "bob-raw-api-key";
    let through = |s: &Sluice| c.get(s.url("/")).header("X-Api-Key", key);

    // The free burst of 20, through B.
    for i in 0..20 {
        assert_eq!(send(through(&b)).await.status, 200, "request {i}");
    }
    assert_eq!(send(through(&b)).await.status, 429);

    let r = send(
        c.put(a.control_url(&format!("/admin/keys/{key}/credits")))
            .bearer_auth(TOKEN)
            .body(r#"{"credits":5}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(credits_on(&b, key).await, 5, "B reads the shared balance");

    // B admits on credits once it has loaded them.
    eventually("B spends a credit", || async {
        (send(through(&b)).await.status == 200).then_some(())
    })
    .await;
    assert_eq!(credits_on(&a, key).await, 4);
    assert_eq!(credits_on(&b, key).await, 4);
    let dump = redis_dump(&redis);
    assert!(dump.contains("sluice:{runtime}:credits"), "{dump}");
    assert!(!dump.contains("bob"), "a raw key reached Redis:\n{dump}");

    // The other four, through either instance; then none is left. (A may
    // not have loaded the balance for its first requests: it refuses them
    // then, and spends nothing.)
    let mut admitted = 0;
    let deadline = Instant::now() + PATIENCE;
    for i in 0.. {
        let s = if i % 2 == 0 { &a } else { &b };
        if send(through(s)).await.status == 200 {
            admitted += 1;
        }
        if credits_on(&a, key).await == 0 && i >= 10 {
            break;
        }
        assert!(Instant::now() < deadline, "gave up: {admitted} admitted");
    }
    assert_eq!(admitted, 4, "each credit admits one request, once");
    assert_eq!(credits_on(&b, key).await, 0);
    assert_eq!(send(through(&b)).await.status, 429);
    assert_eq!(send(through(&a)).await.status, 429);
}
