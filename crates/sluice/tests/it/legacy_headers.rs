//! Opt-in older header fields: `[headers] legacy = true` adds
//! `RateLimit-Limit/-Remaining/-Reset` and `x_ratelimit = true` adds
//! `X-RateLimit-*`, for the most restrictive limit; by default neither is
//! sent. `on_admitted = false` sends the fields with refusals only.

use crate::common;

use common::{Reply, Sluice, client, example, example_path, replace_once, send};

const LEGACY: [&str; 6] = [
    "ratelimit-limit",
    "ratelimit-remaining",
    "ratelimit-reset",
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

/// The quick start with `[headers]` set as given.
fn config(legacy: bool, x_ratelimit: bool) -> String {
    let text = replace_once(
        &example("quickstart.toml"),
        "legacy = false",
        &format!("legacy = {legacy}"),
    );
    replace_once(
        &text,
        "x_ratelimit = false",
        &format!("x_ratelimit = {x_ratelimit}"),
    )
}

/// `(limit, remaining, reset)` of both older forms, which must agree.
fn legacy_fields(reply: &Reply) -> (u64, u64, u64) {
    let draft = (
        reply.int_header("ratelimit-limit"),
        reply.int_header("ratelimit-remaining"),
        reply.int_header("ratelimit-reset"),
    );
    let x = (
        reply.int_header("x-ratelimit-limit"),
        reply.int_header("x-ratelimit-remaining"),
        reply.int_header("x-ratelimit-reset"),
    );
    assert_eq!(draft, x, "RateLimit-* and X-RateLimit-* disagree");
    draft
}

/// Three requests to `/export` (2/min) with one key: two admitted, then
/// a refusal.
async fn exports_until_refused(sluice: &Sluice) -> Vec<Reply> {
    let client = client();
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(send(client.get(sluice.url("/export")).header("X-Api-Key", "e")).await);
    }
    let statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 200, 429]);
    replies
}

#[tokio::test]
async fn opted_in_older_fields_describe_the_tightest_limit() {
    let sluice = Sluice::start_with("legacy", &config(true, true));
    let client = client();

    // Free plan (burst 20) is tighter than the ip guard (burst 2000).
    let reply = send(client.get(sluice.url("/")).header("X-Api-Key", "k1")).await;
    assert_eq!(reply.status, 200);
    assert_eq!(legacy_fields(&reply), (20, 19, 1));
    // The IETF fields are still there.
    reply.policy();
    reply.ratelimit();

    // On a refusal, the refusing limit: export, 2/min.
    let replies = exports_until_refused(&sluice).await;
    assert_eq!(legacy_fields(&replies[1]).0, 2, "export has the least left");
    assert_eq!(legacy_fields(&replies[1]).1, 0);
    let (limit, remaining, reset) = legacy_fields(&replies[2]);
    assert_eq!((limit, remaining), (2, 0));
    assert!((29..=31).contains(&reset), "reset {reset}");
    assert_eq!(reset, replies[2].int_header("retry-after"));
}

#[tokio::test]
async fn by_default_only_the_ietf_fields_are_sent() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    let mut replies = Vec::new();
    for _ in 0..3 {
        replies.push(send(client.get(sluice.url("/export")).header("X-Api-Key", "e")).await);
    }
    assert_eq!(replies[2].status, 429);
    for reply in &replies {
        // Present, so that the absence below means something.
        reply.policy();
        reply.ratelimit();
        for name in LEGACY {
            assert!(!reply.has(name), "`{name}` sent by default");
        }
    }
}

#[tokio::test]
async fn each_older_form_is_opted_into_on_its_own() {
    let client = client();
    for (legacy, x_ratelimit) in [(true, false), (false, true)] {
        let sluice = Sluice::start_with("legacy-one", &config(legacy, x_ratelimit));
        let reply = send(client.get(sluice.url("/")).header("X-Api-Key", "k1")).await;
        assert_eq!(reply.status, 200);
        for name in &LEGACY[..3] {
            assert_eq!(reply.has(name), legacy, "`{name}` with legacy = {legacy}");
        }
        for name in &LEGACY[3..] {
            assert_eq!(
                reply.has(name),
                x_ratelimit,
                "`{name}` with x_ratelimit = {x_ratelimit}"
            );
        }
        let prefix = if legacy { "ratelimit" } else { "x-ratelimit" };
        assert_eq!(reply.int_header(&format!("{prefix}-limit")), 20);
        assert_eq!(reply.int_header(&format!("{prefix}-remaining")), 19);
    }
}

#[tokio::test]
async fn with_on_admitted_false_only_refusals_carry_the_fields() {
    let text = replace_once(
        &config(false, true),
        "on_admitted = true",
        "on_admitted = false",
    );
    let sluice = Sluice::start_with("on-admitted", &text);
    let replies = exports_until_refused(&sluice).await;
    for reply in &replies[..2] {
        for name in [
            "ratelimit-policy",
            "ratelimit",
            "retry-after",
            "x-ratelimit-limit",
        ] {
            assert!(!reply.has(name), "`{name}` sent on an admitted response");
        }
    }
    let refused = &replies[2];
    refused.policy();
    refused.ratelimit();
    assert_eq!(refused.int_header("x-ratelimit-remaining"), 0);
    assert!(refused.int_header("retry-after") >= 29);
}
