//! Quick start, keys and plans: each key has its own counters, the pro key
//! its larger burst, `/export` its own tight limit, and a request without a
//! key is refused with 401.

use crate::common;

use std::time::Instant;

use common::{Reply, Sluice, client, example_path, send, sf_item};

/// Sends `n` GETs with `key` to `path`, and then, only if none was refused
/// (a very slow run), more until one is. Returns the replies and the seconds
/// the first `n` took.
async fn burst(sluice: &Sluice, key: &str, path: &str, n: usize) -> (Vec<Reply>, f64) {
    let client = client();
    let url = sluice.url(path);
    let get = || client.get(&url).header("X-Api-Key", key);
    let mut replies = Vec::new();
    let start = Instant::now();
    for _ in 0..n {
        replies.push(send(get()).await);
    }
    let elapsed = start.elapsed().as_secs_f64();
    while replies.iter().all(|r| r.status == 200) && replies.len() < n + 2000 {
        replies.push(send(get()).await);
    }
    (replies, elapsed)
}

/// Checks a burst against a token bucket of `burst` refilling at `rate`/s:
/// the first `burst` pass, at most what refilled during the first `n`
/// requests passes besides, and some request is refused.
fn check_bucket(replies: &[Reply], n: usize, elapsed: f64, burst: usize, rate: f64) {
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    assert!(
        statuses[..burst].iter().all(|s| *s == 200),
        "the first {burst} were not all admitted: {statuses:?}"
    );
    let admitted = statuses[..n].iter().filter(|s| **s == 200).count();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let refilled = (elapsed * rate).floor() as usize;
    assert!(
        admitted <= burst + refilled + 1,
        "admitted {admitted} of {n} in {elapsed:.3} s"
    );
    assert!(statuses.contains(&429), "never refused");
}

#[tokio::test]
async fn an_exhausted_key_does_not_affect_another() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let (replies, elapsed) = burst(&sluice, "k1", "/", 30).await;
    check_bucket(&replies, 30, elapsed, 20, 10.0);

    let client = client();
    let other = send(client.get(sluice.url("/")).header("X-Api-Key", "k2")).await;
    assert_eq!(other.status, 200);
    // A fresh bucket: the full burst less this request.
    let ratelimit = other.ratelimit();
    assert_eq!(sf_item(&ratelimit, "free").param("r"), 19, "{ratelimit:?}");
}

#[tokio::test]
async fn the_pro_key_gets_a_burst_of_300() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let (replies, elapsed) = burst(&sluice, "demo-pro-key", "/", 330).await;
    check_bucket(&replies, 330, elapsed, 300, 100.0);

    let policy = replies[0].policy();
    let pro = sf_item(&policy, "pro");
    assert_eq!((pro.param("q"), pro.param("w")), (300, 3), "{policy:?}");
    assert!(
        policy.iter().all(|i| i.name != "free"),
        "a pro key must not get the free plan: {policy:?}"
    );
    let refusal = replies.iter().find(|r| r.status == 429).unwrap();
    let body = refusal.problem(429);
    assert_eq!(body["violated-policies"], serde_json::json!(["pro"]));
    assert!(refusal.int_header("retry-after") >= 1);
}

#[tokio::test]
async fn export_admits_two_then_refuses_for_about_thirty_seconds() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    let export = || {
        client
            .get(sluice.url("/export"))
            .header("X-Api-Key", "exporter")
    };

    for i in 0..2 {
        let reply = send(export()).await;
        assert_eq!(reply.status, 200, "export #{i}");
        let policy = reply.policy();
        let e = sf_item(&policy, "export");
        assert_eq!((e.param("q"), e.param("w")), (2, 60), "{policy:?}");
        let ratelimit = reply.ratelimit();
        assert_eq!(sf_item(&ratelimit, "export").param("r"), 1 - i);
    }
    for _ in 0..2 {
        let refused = send(export()).await;
        let body = refused.problem(429);
        assert_eq!(body["violated-policies"], serde_json::json!(["export"]));
        // One token of 2/min comes back in 30 s.
        let retry_after = refused.int_header("retry-after");
        assert!(
            (29..=31).contains(&retry_after),
            "Retry-After: {retry_after}"
        );
        let ratelimit = refused.ratelimit();
        let e = sf_item(&ratelimit, "export");
        assert_eq!(e.param("r"), 0);
        assert!((29..=31).contains(&e.param("t")), "{ratelimit:?}");
    }

    // Other paths and other keys are not held back by the export limit.
    let home = send(client.get(sluice.url("/")).header("X-Api-Key", "exporter")).await;
    assert_eq!(home.status, 200);
    let other = send(client.get(sluice.url("/export")).header("X-Api-Key", "k2")).await;
    assert_eq!(other.status, 200);
}

#[tokio::test]
async fn a_request_without_a_key_is_a_401_problem() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    let reply = send(client.get(sluice.url("/"))).await;
    let body = reply.problem(401);
    assert!(
        body["detail"].as_str().unwrap().contains("x-api-key"),
        "{body}"
    );
    assert!(!reply.has("retry-after"));
}
