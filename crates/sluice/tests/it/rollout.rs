//! Rolling out a new limit on the real binary: in shadow first (nothing
//! shows to clients, the log records what would have been limited), then
//! enforced after a reload.

use crate::common;

use std::time::{Duration, Instant};

use common::{Sluice, client, send};
use sluice_testkit::{RedisServer, require_redis};

const BASE: &str = r#"
[[limits]]
name = "guard"
key = "ip"
rate = "1000/s"
burst = 1000

[[limits]]
name = "new-limit"
key = "ip"
rate = "1/min"
burst = 2
"#;

#[tokio::test]
async fn shadow_then_enforce() {
    shadow_then_enforce_on(&[]).await;
}

/// The same with the limits in Redis: shadowed limits are decided there
/// too, and their counts carry over when they are enforced.
#[tokio::test]
async fn shadow_then_enforce_on_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    shadow_then_enforce_on(&["--store-url", &redis.url()]).await;
}

async fn shadow_then_enforce_on(extra: &[&str]) {
    let s = Sluice::start_with_args("rollout", &format!("{BASE}shadow = true\n"), extra);
    let c = client();
    for _ in 0..5 {
        let r = send(c.get(s.url("/"))).await;
        assert_eq!(r.status, 200);
        let names: Vec<String> = r.policy().iter().map(|i| i.name.clone()).collect();
        assert_eq!(
            names,
            ["guard"],
            "a shadow limit says nothing to the client"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !s.log().contains("would have been limited") {
        assert!(Instant::now() < deadline, "log:\n{}", s.log());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Enforce it for everyone: the counters it kept in shadow now apply.
    std::fs::write(s.config_path(), BASE).unwrap();
    s.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = send(c.get(s.url("/"))).await;
        if r.status == 429 {
            assert_eq!(r.problem(429)["violated-policies"][0], "new-limit");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never enforced; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
