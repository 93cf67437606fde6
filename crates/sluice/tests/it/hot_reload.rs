//! Hot reload of the real binary: SIGHUP, a changed file, and
//! POST /admin/reload; bad configs keep the running one; unchanged limits
//! keep their counters.

use crate::common;

use std::time::{Duration, Instant};

use common::{Reply, Sluice, client, send};

const ONE: &str = r#"
[[limits]]
name = "a"
key = "ip"
rate = "1/min"
burst = 3
"#;

fn two() -> String {
    format!("{ONE}\n[[limits]]\nname = \"b\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 10\n")
}

async fn get(s: &Sluice) -> Reply {
    send(client().get(s.url("/"))).await
}

/// Polls until `done` holds; panics after 20 s (a guard, not a timing claim).
async fn eventually(s: &Sluice, mut done: impl FnMut(&Reply) -> bool) -> Reply {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = send(
            client()
                .post(s.control_url("/v1/check"))
                .body(r#"{"path":"/","client_ip":"192.0.2.200","cost":0}"#),
        )
        .await;
        if done(&r) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "never happened; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn names(r: &Reply) -> Vec<String> {
    r.policy().iter().map(|i| i.name.clone()).collect()
}

#[tokio::test]
async fn sighup_applies_a_new_config_and_unchanged_limits_keep_their_counters() {
    let s = Sluice::start_with("reload-hup", ONE);
    for _ in 0..3 {
        assert_eq!(get(&s).await.status, 200);
    }
    assert_eq!(get(&s).await.status, 429);
    std::fs::write(s.config_path(), two()).unwrap();
    s.signal("HUP");
    eventually(&s, |r| names(r) == ["a", "b"]).await;
    // `a` did not change: still exhausted. `b` is new.
    let r = get(&s).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.problem(429)["violated-policies"][0], "a");
}

#[tokio::test]
async fn a_bad_config_is_reported_with_its_location_and_the_old_one_keeps_serving() {
    let s = Sluice::start_with("reload-bad", ONE);
    assert_eq!(get(&s).await.status, 200);
    std::fs::write(
        s.config_path(),
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/fortnight\"\n",
    )
    .unwrap();
    s.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    let expected = format!("{}:4:8:", s.config_path().display());
    while !s.log().contains(&expected) {
        assert!(
            Instant::now() < deadline,
            "no located error; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Still the old config: `a` with 2 of 3 left.
    let r = get(&s).await;
    assert_eq!(r.status, 200);
    assert_eq!(common::sf_item(&r.ratelimit(), "a").param("r"), 1);
}

#[tokio::test]
async fn a_changed_file_is_picked_up_without_a_signal() {
    let s = Sluice::start_with("reload-watch", ONE);
    std::fs::write(s.config_path(), two()).unwrap();
    eventually(&s, |r| names(r) == ["a", "b"]).await;
}

#[tokio::test]
async fn admin_reload_needs_the_token() {
    let token = "s3cret-admin-token";
    let s = Sluice::start_with_env("reload-admin", ONE, &[("SLUICE_ADMIN_TOKEN", token)]);
    let c = client();
    let url = s.control_url("/admin/reload");
    let r = send(c.post(&url)).await;
    assert_eq!(r.status, 401);
    assert_eq!(r.header("www-authenticate"), "Bearer");
    assert_eq!(send(c.post(&url).bearer_auth("wrong")).await.status, 403);
    std::fs::write(s.config_path(), two()).unwrap();
    let r = send(c.post(&url).bearer_auth(token)).await;
    assert_eq!(r.status, 200, "{:?}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["reloaded"], true);
    eventually(&s, |r| names(r) == ["a", "b"]).await;
    std::fs::write(s.config_path(), "listen = 5\n").unwrap();
    let r = send(c.post(&url).bearer_auth(token)).await;
    assert_eq!(r.status, 422);
    assert!(!s.log().contains(token), "the token must never be logged");
    assert_eq!(
        names(&get(&s).await),
        ["a", "b"],
        "the running config stays"
    );
}

#[tokio::test]
async fn without_a_token_the_admin_routes_are_off() {
    let s = Sluice::start_with("reload-noadmin", ONE);
    let r = send(client().post(s.control_url("/admin/reload"))).await;
    assert_eq!(r.status, 404);
}
