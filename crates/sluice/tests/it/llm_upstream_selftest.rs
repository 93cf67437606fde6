//! The OpenAI-compatible test upstream, used directly: its answers report
//! the usage the request asked for, and `sluice_usage::UsageScan`
//! finds the same usage in them, chunk by chunk, as the proxy will.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sluice_usage::{Limits, Usage, UsageScan};

use crate::common::{client, llm_upstream::LlmUpstream};

/// What came back: the body, the usage the scan found in it, and whether
/// the body ended cleanly.
struct Scanned {
    body: Vec<u8>,
    usage: Option<Usage>,
    complete: bool,
}

/// Sends `request` and feeds the response to a scan as it arrives.
async fn scan(request: reqwest::RequestBuilder) -> Scanned {
    let mut response = request.send().await.expect("send");
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"].as_bytes().to_vec();
    let mut scan =
        UsageScan::for_content_type(&content_type, Limits::default()).expect("a usage type");
    let mut body = Vec::new();
    let complete = loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                scan.feed(&chunk);
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break true,
            Err(_) => break false,
        }
    };
    Scanned {
        body,
        usage: scan.finish(),
        complete,
    }
}

fn usage(prompt: u64, completion: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt + completion,
    })
}

fn chat_request(stream: bool, include_usage: bool) -> Value {
    json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hello there, world"}]},
        ],
        "max_tokens": 7,
        "stream": stream,
        "stream_options": {"include_usage": include_usage},
    })
}

#[tokio::test]
async fn json_answers_report_the_usage_the_scan_finds() {
    let llm = LlmUpstream::start();
    let client = client();
    let url = format!("{}/v1/chat/completions", llm.url());
    let got = scan(
        client
            .post(&url)
            .json(&chat_request(false, false))
            .header("x-seen", "1"),
    )
    .await;
    assert!(got.complete);
    let body: Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["usage"]["total_tokens"], 12);
    assert_eq!(got.usage, usage(5, 7));
    assert_eq!(llm.requests(), 1);
    assert_eq!(llm.last_headers().unwrap()["x-seen"], "1");
    assert_eq!(llm.last_request().unwrap()["model"], "m");

    // Completions, with the counts the test asks for.
    let got = scan(
        client
            .post(format!("{}/v1/completions", llm.url()))
            .header("x-test-completion-tokens", "30")
            .json(&json!({"prompt": ["one two", "three"], "max_tokens": 2})),
    )
    .await;
    assert_eq!(got.usage, usage(3, 30));
    let got = scan(
        client
            .post(&url)
            .header("x-test-no-usage", "1")
            .json(&chat_request(false, false)),
    )
    .await;
    assert_eq!(got.usage, None);
    assert_eq!(llm.requests(), 3);

    let health = client
        .get(format!("{}/healthz", llm.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let bad = client.post(&url).body("not json").send().await.unwrap();
    assert_eq!(bad.status(), 400);
}

#[tokio::test]
async fn streams_report_the_usage_in_the_last_chunk_only() {
    let llm = LlmUpstream::start();
    let client = client();
    let url = format!("{}/v1/chat/completions", llm.url());
    let got = scan(client.post(&url).json(&chat_request(true, true))).await;
    assert!(got.complete);
    let text = String::from_utf8(got.body).unwrap();
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    assert!(events.len() >= 4, "{text}");
    for event in &events[..events.len() - 2] {
        assert!(event.contains(r#""usage":null"#), "{event}");
    }
    assert!(events[events.len() - 2].contains(r#""total_tokens":12"#));
    assert_eq!(got.usage, usage(5, 7));

    // No usage unless asked, or when the test says so.
    let got = scan(client.post(&url).json(&chat_request(true, false))).await;
    assert!(got.complete);
    assert!(!String::from_utf8(got.body).unwrap().contains("usage"));
    assert_eq!(got.usage, None);
    let never = client
        .post(&url)
        .header("x-test-no-usage", "1")
        .json(&chat_request(true, true));
    assert_eq!(scan(never).await.usage, None);

    // Cut off before the usage chunk: the connection drops.
    let cut = client
        .post(&url)
        .header("x-test-cut-after", "2")
        .header("x-test-chunk-delay-ms", "5")
        .json(&chat_request(true, true));
    let got = scan(cut).await;
    assert!(!got.complete);
    assert_eq!(got.usage, None);
    llm.wait_in_flight(0).await;
}

#[tokio::test]
async fn latency_holds_and_in_flight_counts() {
    let llm = LlmUpstream::start();
    let client = client();
    let url = format!("{}/v1/chat/completions", llm.url());

    llm.set_latency(Duration::from_millis(150));
    let started = Instant::now();
    let got = scan(client.post(&url).json(&chat_request(false, false))).await;
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(got.usage, usage(5, 7));
    llm.set_latency(Duration::ZERO);

    llm.hold();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let request = client.post(&url).json(&chat_request(true, true));
            tokio::spawn(scan(request))
        })
        .collect();
    llm.wait_in_flight(3).await;
    assert_eq!(llm.max_in_flight(), 3);
    llm.release();
    for task in tasks {
        assert_eq!(task.await.unwrap().usage, usage(5, 7));
    }
    llm.wait_in_flight(0).await;
    assert_eq!(llm.requests(), 4);
    assert_eq!(llm.max_in_flight(), 3);
}
