//! `examples/llm-gateway.toml` end to end, in front of the OpenAI-compatible
//! test upstream: tokens reserved at admission and settled from the
//! response's usage (JSON and event stream), a stream without usage or cut
//! short standing at its estimate, a key in debt refused while another key
//! is not, the key read from `Authorization: Bearer` or `X-Api-Key`, and at
//! most 4 completions of a key in flight.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, client, example, replace_once, send, sf_item};

fn gateway(upstream: &LlmUpstream) -> Sluice {
    let config = replace_once(
        &example("llm-gateway.toml"),
        "upstream = \"http://127.0.0.1:8000\"",
        &format!("upstream = \"{}\"", upstream.url()),
    );
    Sluice::start_with("llm-gateway", &config)
}

fn completion(stream: bool) -> Value {
    json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "max_tokens": 50,
        "stream": stream,
        "stream_options": {"include_usage": stream},
    })
}

async fn call(sluice: &Sluice, key: &str, body: &Value, extra: &[(&str, &str)]) -> Reply {
    let mut request = client()
        .post(sluice.url("/v1/chat/completions"))
        .header("authorization", format!("Bearer {key}"))
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in extra {
        request = request.header(*name, *value);
    }
    send(request).await
}

/// The tokens left under `free-tokens` as a reply's `RateLimit` shows them.
fn tokens_left(reply: &Reply) -> i64 {
    sf_item(&reply.ratelimit(), "free-tokens").param("r")
}

/// Checks the tokens left are `used` below full, give or take what the
/// rate (20,000 a minute) gave back while the test ran (at most 3 s).
fn assert_used(reply: &Reply, used: i64) {
    let left = tokens_left(reply);
    let expected = 20_000 - used;
    assert!(
        (expected..=expected + 1_000).contains(&left),
        "{left} tokens left, {expected} expected"
    );
}

/// Waits (up to 10 s) until `/metrics` counts `n` settlements of
/// `free-tokens` with `result`.
async fn settled(sluice: &Sluice, result: &str, n: u64) {
    let line = format!("sluice_settlements_total{{limit=\"free-tokens\",result=\"{result}\"}} {n}");
    for _ in 0..1000 {
        let metrics = send(client().get(sluice.control_url("/metrics"))).await;
        if String::from_utf8_lossy(&metrics.body)
            .lines()
            .any(|l| l == line)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never saw `{line}`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_settled_from_the_usage_of_json_and_streamed_answers() {
    let upstream = LlmUpstream::start();
    let sluice = gateway(&upstream);
    let counts = [
        ("x-test-prompt-tokens", "30"),
        ("x-test-completion-tokens", "70"),
    ];

    // JSON: its max_tokens (50) reserved, 100 used, 50 more charged.
    let first = call(&sluice, "alice", &completion(false), &counts).await;
    assert_eq!(
        first.status,
        200,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    assert_used(&first, 50);
    assert_eq!(first.json()["usage"]["total_tokens"], 100);
    settled(&sluice, "debited", 1).await;
    // The upstream was asked for an uncompressed body, to read its usage.
    let asked = upstream.last_headers().unwrap();
    assert_eq!(asked["accept-encoding"], "identity");
    // The body read for its estimate went on whole.
    assert_eq!(upstream.last_request().unwrap(), completion(false));

    // An event stream: its usage is in its last event.
    let streamed = call(&sluice, "alice", &completion(true), &counts).await;
    assert_eq!(streamed.header("content-type"), "text/event-stream");
    assert_used(&streamed, 100 + 50);
    assert!(String::from_utf8_lossy(&streamed.body).ends_with("data: [DONE]\n\n"));
    settled(&sluice, "debited", 2).await;

    // No usage in the stream, or a stream cut short: the estimate stands
    // (a body that is not said to be JSON is not read: the limit's cost,
    // 500, is the estimate).
    let silent = call(
        &sluice,
        "alice",
        &completion(true),
        &[("x-test-no-usage", "1")],
    )
    .await;
    assert_used(&silent, 200 + 50);
    settled(&sluice, "exact", 1).await;
    let cut = client()
        .post(sluice.url("/v1/chat/completions"))
        .header("authorization", "Bearer alice")
        .header("x-test-cut-after", "1")
        .body(completion(true).to_string())
        .send()
        .await
        .unwrap();
    let _ = cut.bytes().await;
    settled(&sluice, "exact", 2).await;
    let after = call(&sluice, "alice", &completion(false), &counts).await;
    assert_used(&after, 200 + 50 + 500 + 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_in_debt_is_refused_and_another_is_not() {
    let upstream = LlmUpstream::start();
    let sluice = gateway(&upstream);
    // 30,000 tokens used: 20,000 fill the minute, 10,000 are debt.
    let big = [
        ("x-test-prompt-tokens", "10000"),
        ("x-test-completion-tokens", "20000"),
    ];
    let first = call(&sluice, "bob", &completion(true), &big).await;
    assert_eq!(first.status, 200);
    settled(&sluice, "debited", 1).await;
    let requests_before = upstream.requests();
    let refused = call(&sluice, "bob", &completion(false), &[]).await;
    let problem = refused.problem(429);
    assert!(
        problem["violated-policies"]
            .as_array()
            .unwrap()
            .contains(&json!("free-tokens")),
        "{problem}"
    );
    assert_eq!(tokens_left(&refused), 0);
    // 10,000 of debt and 50 of estimate at 20,000/min: 30.15 s.
    assert_eq!(refused.int_header("retry-after"), 31);
    assert_eq!(
        upstream.requests(),
        requests_before,
        "never reached the upstream"
    );

    // The same key by X-Api-Key is the same client; another key is free.
    let by_header = send(
        client()
            .post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", "bob")
            .body(completion(false).to_string()),
    )
    .await;
    assert_eq!(by_header.status, 429);
    assert_eq!(
        call(&sluice, "carol", &completion(false), &[]).await.status,
        200
    );
    // Two fields naming two keys: which client it is is ambiguous.
    let both = call(
        &sluice,
        "carol",
        &completion(false),
        &[("x-api-key", "dave")],
    )
    .await;
    both.problem(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_streams_at_most_four_completions_at_once_and_other_calls_pass() {
    let upstream = LlmUpstream::start();
    let sluice = gateway(&upstream);
    upstream.hold();
    let streams: Vec<_> = (0..4)
        .map(|_| {
            let request = client()
                .post(sluice.url("/v1/chat/completions"))
                .header("authorization", "Bearer erin")
                .body(completion(true).to_string());
            tokio::spawn(async move { send(request).await })
        })
        .collect();
    upstream.wait_in_flight(4).await;
    let fifth = call(&sluice, "erin", &completion(true), &[]).await;
    let problem = fifth.problem(429);
    assert_eq!(
        problem["violated-policies"],
        json!(["free-streams"]),
        "{problem}"
    );
    assert!(
        fifth
            .header("ratelimit-policy")
            .contains("\"free-streams\";q=4;qu=\"concurrent-requests\""),
        "{}",
        fifth.header("ratelimit-policy")
    );
    // A body too long to read (its `stream` past the first MiB) counts
    // as a stream: a client cannot hide the flag from the limit.
    let mut long = completion(false);
    long["padding"] = json!("x".repeat(1 << 20));
    long["stream"] = json!(true);
    assert_eq!(call(&sluice, "erin", &long, &[]).await.status, 429);
    // A call that does not stream takes no slot: it reaches the upstream.
    let plain = tokio::spawn({
        let request = client()
            .post(sluice.url("/v1/chat/completions"))
            .header("authorization", "Bearer erin")
            .header("content-type", "application/json")
            .body(completion(false).to_string());
        async move { send(request).await }
    });
    upstream.wait_in_flight(5).await;
    upstream.release();
    for s in streams {
        assert_eq!(s.await.unwrap().status, 200);
    }
    assert_eq!(plain.await.unwrap().status, 200);
    assert_eq!(upstream.max_in_flight(), 5);
}
