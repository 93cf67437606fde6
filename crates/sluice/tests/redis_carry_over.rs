//! Changing a key's plan on a Redis store carries its used quota over, as
//! on the memory store: a free key (burst 20) that used 15 moves to pro
//! (burst 300) having used about three quarters of it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Sluice, TempConfig, client, example, replace_once, send};
use sluice_testkit::{RedisServer, require_redis};

#[tokio::test]
async fn a_plan_change_carries_used_quota_over_in_redis() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let text = replace_once(
        &example("quickstart.toml"),
        "[store]\n",
        "[store]\ntimeout = \"2s\"\n",
    );
    let config = TempConfig::new("redis-carry-over", &text);
    let sluice = Sluice::start_env(
        config.path(),
        &["--store-url", &redis.url()],
        &[
            ("SLUICE_KEY_SECRET", "carry"),
            ("SLUICE_ADMIN_TOKEN", "t0ken"),
        ],
    );
    let client = client();
    for _ in 0..15 {
        let r = send(client.get(sluice.url("/")).header("X-Api-Key", "carol")).await;
        assert_eq!(r.status, 200);
        assert!(!r.has("sluice-fallback"));
    }
    let r = send(
        client
            .put(sluice.control_url("/admin/keys/carol/plan"))
            .bearer_auth("t0ken")
            .header("content-type", "application/json")
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert!(r.status == 200 || r.status == 204, "{r:?}");

    let r = send(client.get(sluice.url("/")).header("X-Api-Key", "carol")).await;
    assert_eq!(r.status, 200);
    let fields = r.ratelimit();
    let left = common::sf_item(&fields, "pro").param("r");
    // 15 of 20 used is 225 of 300; minus this request, plus at most a few
    // refilled meanwhile. A fresh pro bucket would say 299.
    assert!((60..=100).contains(&left), "pro remaining {left}");
}
