//! Tests of the usage scan: JSON bodies and event streams, every way of
//! splitting them into chunks, and bodies built to break it.

use super::*;
use proptest::prelude::*;

const USAGE_8: &str = r#"{"prompt_tokens":3,"completion_tokens":5,"total_tokens":8}"#;

fn usage(prompt: u64, completion: u64, total: u64) -> Option<Usage> {
    Some(Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
    })
}

fn scan_with(kind: BodyKind, limits: Limits, chunks: &[&[u8]]) -> Option<Usage> {
    let mut scan = UsageScan::new(kind, limits);
    for chunk in chunks {
        scan.feed(chunk);
        assert!(scan.buffered_capacity() <= limits.max_usage_bytes);
    }
    scan.finish()
}

fn json(body: &str) -> Option<Usage> {
    scan_with(BodyKind::Json, Limits::default(), &[body.as_bytes()])
}

fn events(body: &str) -> Option<Usage> {
    scan_with(BodyKind::EventStream, Limits::default(), &[body.as_bytes()])
}

/// The body fed whole, split in two at every byte, and one byte at a time
/// all give the same answer, which is returned.
fn every_split(kind: BodyKind, body: &[u8]) -> Option<Usage> {
    let whole = scan_with(kind, Limits::default(), &[body]);
    for i in 0..=body.len() {
        let (a, b) = body.split_at(i);
        assert_eq!(
            scan_with(kind, Limits::default(), &[a, b]),
            whole,
            "split at {i}"
        );
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(scan_with(kind, Limits::default(), &bytes), whole);
    whole
}

#[test]
fn usage_at_the_start_middle_and_end_of_a_json_body() {
    let start = format!(r#"{{"usage":{USAGE_8},"id":"x","choices":[{{"text":"hi"}}]}}"#);
    let middle = format!(r#"{{"id":"x","usage":{USAGE_8},"choices":[]}}"#);
    let end = format!(
        r#" {{ "id" : "x" , "choices" : [ {{ "a" : [1, 2, {{}}] }} ] , "usage" : {USAGE_8} }} "#
    );
    for body in [start, middle, end] {
        assert_eq!(
            every_split(BodyKind::Json, body.as_bytes()),
            usage(3, 5, 8),
            "{body}"
        );
    }
}

#[test]
fn only_the_top_level_usage_counts() {
    let nested = format!(
        r#"{{"choices":[{{"usage":{USAGE_8}}}],"meta":{{"usage":{USAGE_8}}},"n":[[{{"usage":1}}]]}}"#
    );
    assert_eq!(every_split(BodyKind::Json, nested.as_bytes()), None);
    let both = format!(
        r#"{{"meta":{{"usage":{USAGE_8}}},"usage":{{"input_tokens":1,"output_tokens":2}}}}"#
    );
    assert_eq!(every_split(BodyKind::Json, both.as_bytes()), usage(1, 2, 3));
}

#[test]
fn strings_with_usage_braces_and_escapes_are_only_strings() {
    let body = format!(
        r#"{{"text":"\"usage\": {USAGE_8_ESC} }}]{{[ \\","usage ":{USAGE_8},"k\"usage":{USAGE_8},"v":"usage","usage":{{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2,"note":"}}\"\\\u0022"}}}}"#,
        USAGE_8_ESC = USAGE_8.replace('"', "\\\"")
    );
    assert_eq!(
        every_split(BodyKind::Json, body.as_bytes()),
        usage(1, 1, 2),
        "{body}"
    );
    // A value that is the string "usage" is not a key.
    let body = format!(r#"{{"a":"usage","b":{USAGE_8}}}"#);
    assert_eq!(every_split(BodyKind::Json, body.as_bytes()), None);
}

#[test]
fn an_escaped_key_is_decoded() {
    let body = format!(r#"{{"us\u0061ge":{USAGE_8}}}"#);
    assert_eq!(every_split(BodyKind::Json, body.as_bytes()), usage(3, 5, 8));
    let long_key = format!(r#"{{"{}":{USAGE_8}}}"#, "\\u0075".repeat(40));
    assert_eq!(json(&long_key), None);
}

#[test]
fn what_is_not_a_usage() {
    for body in [
        "",
        "{}",
        r#"{"usage":null}"#,
        r#"{"usage":{}}"#,
        r#"{"usage":[1,2]}"#,
        r#"{"usage":"8"}"#,
        r#"{"usage":{"prompt_tokens":-1,"completion_tokens":5}}"#,
        r#"{"usage":{"prompt_tokens":1.5,"completion_tokens":5}}"#,
        r#"{"usage":{"prompt_tokens":1e3,"completion_tokens":5}}"#,
        r#"{"usage":{"prompt_tokens":"3","completion_tokens":5}}"#,
        r#"{"usage":{"prompt_tokens":null,"completion_tokens":5}}"#,
        r#"{"usage":{"prompt_tokens":3,"completion_tokens":5,"total_tokens":9007199254740993}}"#,
        r#"{"usage":{"prompt_tokens":3,"completion_tokens":99999999999999999999999}}"#,
        r#"{"usage":{"prompt_tokens":3,"input_tokens":-3}}"#,
        r#"{"usage":{"prompt_tokens":3,"completion_tokens":5}"#,
        r#"{"usage":{"prompt_tokens":3,"completion_tokens":5,}}"#,
        &format!("[{USAGE_8}]"),
        &format!(r#"{{"a":1}} {{"usage":{USAGE_8}}}"#),
        &format!(r#"x{{"usage":{USAGE_8}}}"#),
    ] {
        assert_eq!(json(body), None, "{body}");
    }
}

#[test]
fn the_counts_other_apis_name() {
    assert_eq!(
        json(r#"{"usage":{"input_tokens":10,"output_tokens":4}}"#),
        usage(10, 4, 14)
    );
    assert_eq!(
        json(
            r#"{"usage":{"input_tokens":10,"output_tokens":4,"total_tokens":15,"output_tokens_details":{"reasoning_tokens":2}}}"#
        ),
        usage(10, 4, 15)
    );
    // Embeddings: no completion.
    assert_eq!(
        json(r#"{"usage":{"prompt_tokens":7,"total_tokens":7}}"#),
        usage(7, 0, 7)
    );
    assert_eq!(json(r#"{"usage":{"output_tokens":4}}"#), usage(0, 4, 4));
    let max = MAX_TOKENS;
    assert_eq!(
        json(&format!(
            r#"{{"usage":{{"prompt_tokens":{max},"completion_tokens":{max}}}}}"#
        )),
        usage(max, max, 2 * max)
    );
}

#[test]
fn the_last_valid_usage_member_wins() {
    let body = format!(r#"{{"usage":{USAGE_8},"usage":{{"output_tokens":1}},"usage":null}}"#);
    assert_eq!(json(&body), usage(0, 1, 1));
}

#[test]
fn an_oversized_usage_is_given_up() {
    let pad = "x".repeat(5000);
    let body = format!(r#"{{"usage":{{"prompt_tokens":3,"completion_tokens":5,"pad":"{pad}"}}}}"#);
    assert_eq!(json(&body), None);
    let mut limits = Limits {
        max_usage_bytes: 8 * 1024,
        ..Limits::default()
    };
    assert_eq!(
        scan_with(BodyKind::Json, limits, &[body.as_bytes()]),
        usage(3, 5, 8)
    );
    // Giving up on one member does not stop a later one.
    let body = format!(r#"{{"usage":"{pad}","usage":{USAGE_8}}}"#);
    assert_eq!(json(&body), usage(3, 5, 8));
    limits.max_usage_bytes = 0;
    assert_eq!(
        scan_with(BodyKind::Json, limits, &[USAGE_8.as_bytes()]),
        None
    );
}

#[test]
fn deep_nesting_costs_nothing() {
    let depth = 200_000;
    let body = format!(
        r#"{{"a":{}{},"usage":{USAGE_8}}}"#,
        "[{\"usage\":".repeat(depth),
        "1}]".repeat(depth)
    );
    let mut scan = UsageScan::new(BodyKind::Json, Limits::default());
    for chunk in body.as_bytes().chunks(4096) {
        scan.feed(chunk);
        assert!(scan.buffered_capacity() <= 64);
    }
    assert_eq!(scan.finish(), usage(3, 5, 8));
    // Deep inside the usage itself: over the bound, given up.
    let body = format!(r#"{{"usage":{}}}"#, "[".repeat(depth));
    assert_eq!(json(&body), None);
}

#[test]
fn a_100_mb_body_is_scanned_in_constant_memory() {
    let limits = Limits::default();
    let mut scan = UsageScan::new(BodyKind::Json, limits);
    scan.feed(br#"{"id":"x","choices":[{"message":{"content":""#);
    let chunk = b"lorem ipsum {\\\"usage\\\": [] } ".repeat(2048);
    let mut fed = 0;
    while fed < 100 * 1024 * 1024 {
        scan.feed(&chunk);
        fed += chunk.len();
    }
    assert!(scan.buffered_capacity() <= limits.max_usage_bytes);
    scan.feed(format!(r#""}}}}],"usage":{USAGE_8}}}"#).as_bytes());
    assert!(scan.buffered_capacity() <= limits.max_usage_bytes);
    assert_eq!(scan.finish(), usage(3, 5, 8));
}

fn sse_body(line_end: &str) -> String {
    let events = [
        r#"data: {"choices":[{"delta":{"content":"Hi"}}],"usage":null}"#.to_owned(),
        ": a comment".to_owned(),
        "event: message\nid: 7".to_owned(),
        r#"data: {"choices":[{"delta":{}}],"usage":null}"#.to_owned(),
        format!(r#"data: {{"choices":[],"usage":{USAGE_8}}}"#),
        "data: [DONE]".to_owned(),
    ];
    let mut body = String::new();
    for event in events {
        body.push_str(&event.replace('\n', line_end));
        body.push_str(line_end);
        body.push_str(line_end);
    }
    body
}

#[test]
fn event_streams_with_any_line_end() {
    for line_end in ["\n", "\r\n", "\r"] {
        let body = sse_body(line_end);
        assert_eq!(
            every_split(BodyKind::EventStream, body.as_bytes()),
            usage(3, 5, 8),
            "{body:?}"
        );
    }
    // Mixed, and a BOM at the start.
    let body = format!(
        "\u{feff}data: {{}}\r\n\ndata:{{\"usage\":\rdata:{USAGE_8}}}\n\rdata: [DONE]\r\n\r\n"
    );
    assert_eq!(
        every_split(BodyKind::EventStream, body.as_bytes()),
        usage(3, 5, 8)
    );
}

#[test]
fn the_last_event_with_a_usage_wins() {
    let body = format!(
        "data: {{\"usage\":{{\"output_tokens\":1}}}}\n\ndata: {{\"usage\":{USAGE_8}}}\n\ndata: {{\"usage\":null}}\n\ndata: {{\"usage\":{{\"prompt_tokens\":-1}}}}\n\ndata: [DONE]\n\n"
    );
    assert_eq!(
        every_split(BodyKind::EventStream, body.as_bytes()),
        usage(3, 5, 8)
    );
}

#[test]
fn what_an_event_stream_does_not_count() {
    for body in [
        String::new(),
        "data: [DONE]\n\n".to_owned(),
        "data: {\"usage\":null}\n\ndata: [DONE]\n\n".to_owned(),
        // No blank line after the last event: discarded, as the spec says.
        format!("data: {{\"usage\":{USAGE_8}}}\n"),
        // Not `data`.
        format!("dat: {{\"usage\":{USAGE_8}}}\n\ndatas: {{\"usage\":{USAGE_8}}}\n\n"),
        format!(": data: {{\"usage\":{USAGE_8}}}\n\n"),
        // Nested in the event's object (as Anthropic's message_start).
        format!("data: {{\"message\":{{\"usage\":{USAGE_8}}}}}\n\n"),
    ] {
        assert_eq!(events(&body), None, "{body:?}");
    }
}

#[test]
fn multi_line_data_is_joined() {
    let body =
        "data: {\"usage\":\ndata\ndata: {\"input_tokens\":2,\ndata:\"output_tokens\":3}}\n\n";
    assert_eq!(
        every_split(BodyKind::EventStream, body.as_bytes()),
        usage(2, 3, 5)
    );
    // The LF joins: a key cannot be split across data lines.
    let body = format!("data: {{\"usa\ndata: ge\":{USAGE_8}}}\n\n");
    assert_eq!(events(&body), None);
}

#[test]
fn an_oversized_event_is_skipped() {
    let pad = "x".repeat(70 * 1024);
    let body = format!(
        "data: {{\"usage\":{USAGE_8},\"pad\":\"{pad}\"}}\n\ndata: {{\"usage\":{{\"output_tokens\":1}}}}\n\n: {pad}\n\n"
    );
    assert_eq!(events(&body), usage(0, 1, 1));
    let body = format!("data: {{\"usage\":{USAGE_8},\"pad\":\"{pad}\"}}\n\n");
    assert_eq!(events(&body), None);
    let limits = Limits {
        max_event_bytes: 128 * 1024,
        ..Limits::default()
    };
    assert_eq!(
        scan_with(BodyKind::EventStream, limits, &[body.as_bytes()]),
        usage(3, 5, 8)
    );
}

#[test]
fn content_types() {
    for (value, kind) in [
        ("application/json", Some(BodyKind::Json)),
        ("Application/JSON ; charset=UTF-8", Some(BodyKind::Json)),
        ("application/problem+json", Some(BodyKind::Json)),
        ("text/event-stream", Some(BodyKind::EventStream)),
        (
            "TEXT/EVENT-STREAM;charset=utf-8",
            Some(BodyKind::EventStream),
        ),
        ("text/json", None),
        ("application/+json", None),
        ("application/jsonx", None),
        ("text/plain", None),
        ("json", None),
        ("", None),
    ] {
        assert_eq!(
            BodyKind::from_content_type(value.as_bytes()),
            kind,
            "{value}"
        );
    }
    assert!(UsageScan::for_content_type(b"text/html", Limits::default()).is_none());
    assert!(UsageScan::for_content_type(b"application/json", Limits::default()).is_some());
}

fn chunked(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut chunks = Vec::new();
    let mut at = 0;
    for cut in cuts {
        chunks.push(body[at..cut].to_vec());
        at = cut;
    }
    chunks.push(body[at..].to_vec());
    chunks
}

proptest! {
    #[test]
    fn any_chunking_gives_the_same_usage(
        cuts in proptest::collection::vec(any::<usize>(), 0..12),
        sse in any::<bool>(),
    ) {
        let (kind, body) = if sse {
            (BodyKind::EventStream, sse_body("\r\n"))
        } else {
            (BodyKind::Json, format!(r#"{{"id":"a\"b","choices":[{{"usage":1}}],"usage":{USAGE_8}}}"#))
        };
        let chunks = chunked(body.as_bytes(), &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(scan_with(kind, Limits::default(), &refs), usage(3, 5, 8));
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 0..16),
        max_usage_bytes in 0usize..128,
        max_event_bytes in 0usize..256,
    ) {
        let limits = Limits { max_usage_bytes, max_event_bytes };
        for kind in [BodyKind::Json, BodyKind::EventStream] {
            let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
            let _ = scan_with(kind, limits, &refs);
        }
        let _ = BodyKind::from_content_type(&chunks.concat());
    }

    #[test]
    fn json_like_noise_never_panics(
        body in r#"[{}\[\]":,\\ u0-9a-z\r\n-]{0,200}"#,
    ) {
        for prefix in ["", "{\"usage\":", "data: {\"usage\":"] {
            let text = format!("{prefix}{body}");
            for kind in [BodyKind::Json, BodyKind::EventStream] {
                let _ = every_split_quiet(kind, text.as_bytes());
            }
        }
    }
}

/// The body fed one byte at a time and whole agree (no panics either way).
fn every_split_quiet(kind: BodyKind, body: &[u8]) -> Option<Usage> {
    let whole = scan_with(kind, Limits::default(), &[body]);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(scan_with(kind, Limits::default(), &bytes), whole);
    whole
}
