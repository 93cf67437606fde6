//! Quick start, one key: with `examples/quickstart.toml`, the free plan's
//! token bucket (10/s, burst 20) admits a burst of 20 requests, then refuses
//! with 429s that carry every documented field.

use crate::common;

use std::time::Instant;

use common::{Reply, Sluice, client, example_path, send};

const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";

fn check_refusal(reply: &Reply) {
    let body = reply.problem(429);
    assert_eq!(body["type"], QUOTA_EXCEEDED, "{body}");
    assert_eq!(
        body["violated-policies"],
        serde_json::json!(["free"]),
        "{body}"
    );

    let retry_after = reply.int_header("retry-after");
    assert!(retry_after >= 1, "Retry-After: {retry_after}");
    assert_eq!(body["retry_after"], retry_after, "{body}");
    // The limit in its words as configured (`rate = "10/s", burst = 20`),
    // not as the header fields' quota and window put it (20 per 2 s).
    assert_eq!(
        body["detail"],
        format!("Rate limit `free` exceeded (10 per second, burst 20); retry in {retry_after} s."),
        "{body}"
    );

    let policy = reply.policy();
    let free = common::sf_item(&policy, "free");
    assert_eq!((free.param("q"), free.param("w")), (20, 2), "{policy:?}");

    let ratelimit = reply.ratelimit();
    let free = common::sf_item(&ratelimit, "free");
    assert_eq!(free.param("r"), 0, "{ratelimit:?}");
    let t = free.param("t");
    assert!(t >= 1, "{ratelimit:?}");
    assert!(
        i64::try_from(retry_after).unwrap() >= t,
        "Retry-After {retry_after} is earlier than the refusing limit's t={t}"
    );
}

#[tokio::test]
async fn thirty_rapid_requests_admit_the_burst_of_twenty_then_429() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    let url = sluice.url("/");
    let get = || client.get(&url).header("X-Api-Key", "k1");

    let mut replies = Vec::new();
    let start = Instant::now();
    for _ in 0..30 {
        replies.push(send(get()).await);
    }
    let elapsed = start.elapsed().as_secs_f64();

    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert!(
        statuses.iter().all(|s| *s == 200 || *s == 429),
        "{statuses:?}"
    );
    // A full bucket admits its whole burst, in order.
    assert!(statuses[..20].iter().all(|s| *s == 200), "{statuses:?}");
    let admitted = statuses.iter().filter(|s| **s == 200).count();
    // Plus what refilled at 10/s while the loop ran.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let refilled = (elapsed * 10.0).floor() as usize;
    assert!(
        (20..=20 + refilled + 1).contains(&admitted),
        "admitted {admitted} in {elapsed:.3} s: {statuses:?}"
    );

    // Admitted answers are the echo of the decision, with the fields.
    let first = &replies[0];
    assert_eq!(first.json()["allowed"], true);
    let policy = first.policy();
    let free = common::sf_item(&policy, "free");
    assert_eq!((free.param("q"), free.param("w")), (20, 2), "{policy:?}");
    let ratelimit = first.ratelimit();
    assert_eq!(common::sf_item(&ratelimit, "free").param("r"), 19);
    assert!(!first.has("retry-after"));

    let mut refusals: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    // Only a very slow run can refill enough to see no 429 in 30 requests;
    // then keep asking until one comes.
    let mut extra = Vec::new();
    while refusals.is_empty() && extra.len() < 500 {
        let reply = send(get()).await;
        if reply.status == 429 {
            extra.push(reply);
            break;
        }
        extra.push(reply);
    }
    refusals.extend(extra.iter().filter(|r| r.status == 429));
    assert!(!refusals.is_empty(), "never refused: {statuses:?}");
    for reply in refusals {
        check_refusal(reply);
    }
}
