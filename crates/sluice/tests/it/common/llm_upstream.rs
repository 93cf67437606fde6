//! A small OpenAI-compatible upstream for tests: JSON and event-stream
//! completions that report their usage, with a latency the test controls.
//!
//! `POST /v1/chat/completions` and `POST /v1/completions` answer with a
//! completion whose usage is deterministic: the prompt's tokens are its
//! whitespace-separated words (the messages' text, or `prompt`), the
//! completion's are `max_completion_tokens`, else `max_tokens`, else
//! [`DEFAULT_COMPLETION_TOKENS`]. With `"stream": true` the answer is an
//! event stream of chunks, with the usage in a last chunk only when
//! `stream_options.include_usage` is true (and `"usage": null` in the
//! chunks before it, as OpenAI sends), then `data: [DONE]`.
//!
//! A request can ask, with header fields, for:
//! - `x-test-prompt-tokens: N` / `x-test-completion-tokens: N`: those counts;
//! - `x-test-no-usage: 1`: no usage at all (a JSON body without `usage`, a
//!   stream without the usage chunk);
//! - `x-test-cut-after: N`: the body cut off after N chunks (a JSON body is
//!   sent as two chunks), the connection dropped mid-response;
//! - `x-test-chunk-delay-ms: N`: a pause before each chunk after the first.
//!
//! `GET /healthz` answers 200. The handle counts requests, those in flight
//! (from arrival until the response body is done or dropped) and the most
//! in flight at once, keeps the last request's header fields and JSON, sets
//! a latency before each response starts, and can hold responses until the
//! test releases them.

#![allow(dead_code)]

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::task::{Context, Poll};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_stream::wrappers::ReceiverStream;

/// The completion's tokens when the request names no maximum.
pub const DEFAULT_COMPLETION_TOKENS: u64 = 16;

/// The model named in answers when the request names none.
const DEFAULT_MODEL: &str = "sluice-test-model";

/// The most chunks of content a stream sends (the tokens are spread over
/// them), so a large `max_tokens` stays cheap.
const MAX_CONTENT_CHUNKS: u64 = 4;

/// What the handle and the server share.
#[derive(Debug)]
struct State {
    requests: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    latency_micros: AtomicU64,
    last_headers: Mutex<Option<HeaderMap>>,
    last_request: Mutex<Option<Value>>,
    /// `true` while responses are held.
    held: tokio::sync::watch::Sender<bool>,
}

/// Counts a request in flight until dropped.
#[derive(Debug)]
struct InFlight(Arc<State>);

impl InFlight {
    fn new(state: &Arc<State>) -> Self {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        Self(state.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body fed by a task, that keeps its request in flight until
/// it is done or dropped.
struct Tracked {
    chunks: ReceiverStream<io::Result<Bytes>>,
    _in_flight: InFlight,
}

impl tokio_stream::Stream for Tracked {
    type Item = io::Result<Bytes>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.get_mut().chunks).poll_next(cx)
    }
}

/// An OpenAI-compatible server on an ephemeral loopback port, on its own
/// thread and runtime. Stopped on drop.
#[derive(Debug)]
pub struct LlmUpstream {
    addr: SocketAddr,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LlmUpstream {
    /// Starts one; returns once it listens.
    pub fn start() -> Self {
        let state = Arc::new(State {
            requests: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            latency_micros: AtomicU64::new(0),
            last_headers: Mutex::new(None),
            last_request: Mutex::new(None),
            held: tokio::sync::watch::Sender::new(false),
        });
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let app_state = state.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("LLM upstream runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind the LLM upstream");
                ready_tx.send(listener.local_addr().expect("addr")).unwrap();
                let app = axum::Router::new()
                    .route("/healthz", axum::routing::get(|| async { "ok\n" }))
                    .route("/v1/chat/completions", axum::routing::post(chat))
                    .route("/v1/completions", axum::routing::post(completions))
                    .with_state(app_state)
                    .into_make_service();
                tokio::select! {
                    r = axum::serve(listener, app) => r.expect("LLM upstream serve"),
                    _ = stopped => {}
                }
            });
        });
        let addr = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the LLM upstream started");
        Self {
            addr,
            state,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Its address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its base URL (`http://127.0.0.1:PORT`, no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The wait before each response starts, from now on.
    pub fn set_latency(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.state.latency_micros.store(micros, Ordering::SeqCst);
    }

    /// Holds every response (those waiting now and those to come) before
    /// it starts, until [`release`](Self::release).
    pub fn hold(&self) {
        self.state.held.send_replace(true);
    }

    /// Lets held responses go.
    pub fn release(&self) {
        self.state.held.send_replace(false);
    }

    /// Completion requests received (counted once the body is read).
    pub fn requests(&self) -> usize {
        self.state.requests.load(Ordering::SeqCst)
    }

    /// Completion requests in flight now: received, and the response body
    /// not yet done or dropped.
    pub fn in_flight(&self) -> usize {
        self.state.in_flight.load(Ordering::SeqCst)
    }

    /// The most completion requests in flight at once so far.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// The last completion request's header fields, as received.
    pub fn last_headers(&self) -> Option<HeaderMap> {
        self.state.last_headers.lock().unwrap().clone()
    }

    /// The last completion request's JSON body.
    pub fn last_request(&self) -> Option<Value> {
        self.state.last_request.lock().unwrap().clone()
    }

    /// Waits until `n` requests are in flight; panics after 10 s.
    pub async fn wait_in_flight(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.in_flight() != n {
            assert!(
                Instant::now() < deadline,
                "{} in flight, not {n}",
                self.in_flight()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl LlmUpstream {
    /// Stops it as a crashed process stops: every connection closed at
    /// once, held responses and streams mid-way included (dropping it lets
    /// held responses go first).
    pub fn kill(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for LlmUpstream {
    fn drop(&mut self) {
        self.release();
        self.stop_now();
    }
}

/// Which endpoint answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completions,
}

/// What a request asked for, after the test's header fields.
#[derive(Debug)]
struct Plan {
    endpoint: Endpoint,
    model: String,
    prompt_tokens: u64,
    completion_tokens: u64,
    stream: bool,
    include_usage: bool,
    no_usage: bool,
    cut_after: Option<usize>,
    chunk_delay: Duration,
}

async fn chat(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(state, Endpoint::Chat, headers, body).await
}

async fn completions(
    axum::extract::State(state): axum::extract::State<Arc<State>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    complete(state, Endpoint::Completions, headers, body).await
}

/// Answers a completion request.
async fn complete(
    state: Arc<State>,
    endpoint: Endpoint,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let in_flight = InFlight::new(&state);
    state.requests.fetch_add(1, Ordering::SeqCst);
    *state.last_headers.lock().unwrap() = Some(headers.clone());
    let request: Value = match serde_json::from_slice(&body) {
        Ok(value @ Value::Object(_)) => value,
        _ => return bad_request("the body is not a JSON object"),
    };
    *state.last_request.lock().unwrap() = Some(request.clone());
    let plan = plan(endpoint, &headers, &request);

    let mut held = state.held.subscribe();
    let _ = held.wait_for(|held| !*held).await;
    let latency = Duration::from_micros(state.latency_micros.load(Ordering::SeqCst));
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }

    let (content_type, chunks) = if plan.stream {
        ("text/event-stream", stream_chunks(&plan))
    } else {
        let body = serde_json::to_vec(&completion(&plan)).expect("serialize");
        let (a, b) = body.split_at(body.len() / 2);
        ("application/json", vec![a.to_vec(), b.to_vec()])
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(deliver(tx, chunks, plan.cut_after, plan.chunk_delay));
    let body = Body::from_stream(Tracked {
        chunks: ReceiverStream::new(rx),
        _in_flight: in_flight,
    });
    Response::builder()
        .header("content-type", content_type)
        .header("cache-control", "no-cache")
        .body(body)
        .expect("the LLM upstream response")
}

/// Sends the chunks, pausing between them; cut off after `cut_after`
/// chunks with an error, which drops the connection.
async fn deliver(
    tx: tokio::sync::mpsc::Sender<io::Result<Bytes>>,
    chunks: Vec<Vec<u8>>,
    cut_after: Option<usize>,
    delay: Duration,
) {
    for (i, chunk) in chunks.into_iter().enumerate() {
        if cut_after == Some(i) {
            let cut = io::Error::new(io::ErrorKind::ConnectionAborted, "cut off by the test");
            let _ = tx.send(Err(cut)).await;
            return;
        }
        if i > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        if tx.send(Ok(Bytes::from(chunk))).await.is_err() {
            return;
        }
    }
}

/// A 400 in OpenAI's error shape.
fn bad_request(message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "invalid_request_error"}});
    (StatusCode::BAD_REQUEST, axum::Json(body)).into_response()
}

/// A header field as a number.
fn header_number(headers: &HeaderMap, name: &str) -> Option<u64> {
    headers.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// What the request asks for.
fn plan(endpoint: Endpoint, headers: &HeaderMap, request: &Value) -> Plan {
    let prompt_tokens =
        header_number(headers, "x-test-prompt-tokens").unwrap_or_else(|| prompt_words(request));
    let completion_tokens = header_number(headers, "x-test-completion-tokens")
        .or_else(|| request["max_completion_tokens"].as_u64())
        .or_else(|| request["max_tokens"].as_u64())
        .unwrap_or(DEFAULT_COMPLETION_TOKENS);
    Plan {
        endpoint,
        model: request["model"]
            .as_str()
            .unwrap_or(DEFAULT_MODEL)
            .to_owned(),
        prompt_tokens,
        completion_tokens,
        stream: request["stream"].as_bool() == Some(true),
        include_usage: request["stream_options"]["include_usage"].as_bool() == Some(true),
        no_usage: headers.contains_key("x-test-no-usage"),
        cut_after: header_number(headers, "x-test-cut-after").and_then(|n| usize::try_from(n).ok()),
        chunk_delay: Duration::from_millis(
            header_number(headers, "x-test-chunk-delay-ms").unwrap_or(0),
        ),
    }
}

/// The prompt's whitespace-separated words: every message's text (a
/// string, or the `text` of each part) for chat, `prompt` (a string or
/// strings) for completions.
fn prompt_words(request: &Value) -> u64 {
    fn words(text: &str) -> u64 {
        text.split_whitespace().count() as u64
    }
    fn texts(value: &Value) -> u64 {
        match value {
            Value::String(text) => words(text),
            Value::Array(parts) => parts
                .iter()
                .map(|part| match part {
                    Value::String(text) => words(text),
                    other => other["text"].as_str().map_or(0, words),
                })
                .sum(),
            _ => 0,
        }
    }
    let messages = request["messages"].as_array().map_or(0, |messages| {
        messages.iter().map(|m| texts(&m["content"])).sum()
    });
    messages + texts(&request["prompt"])
}

/// The usage the answer reports.
fn usage(plan: &Plan) -> Value {
    json!({
        "prompt_tokens": plan.prompt_tokens,
        "completion_tokens": plan.completion_tokens,
        "total_tokens": plan.prompt_tokens + plan.completion_tokens,
    })
}

/// `n` tokens of text: one word each.
fn text(n: u64) -> String {
    let mut text = String::new();
    for i in 0..n.min(64) {
        text.push_str(if i == 0 { "tok" } else { " tok" });
    }
    text
}

/// A non-streaming answer.
fn completion(plan: &Plan) -> Value {
    let content = text(plan.completion_tokens);
    let (object, choice) = match plan.endpoint {
        Endpoint::Chat => (
            "chat.completion",
            json!({"index": 0, "message": {"role": "assistant", "content": content},
                   "logprobs": null, "finish_reason": "length"}),
        ),
        Endpoint::Completions => (
            "text_completion",
            json!({"index": 0, "text": content, "logprobs": null, "finish_reason": "length"}),
        ),
    };
    let mut body = json!({
        "id": "cmpl-sluice-test",
        "object": object,
        "created": 0,
        "model": plan.model,
        "choices": [choice],
    });
    if !plan.no_usage {
        body["usage"] = usage(plan);
    }
    body
}

/// One streamed chunk's choice.
fn chunk_choice(plan: &Plan, content: Option<&str>, finish: Option<&str>) -> Value {
    match plan.endpoint {
        Endpoint::Chat => {
            let delta = content.map_or_else(|| json!({}), |c| json!({"content": c}));
            json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
        }
        Endpoint::Completions => json!({"index": 0, "text": content.unwrap_or(""),
                                        "logprobs": null, "finish_reason": finish}),
    }
}

/// The event-stream answer, one event per chunk.
fn stream_chunks(plan: &Plan) -> Vec<Vec<u8>> {
    let object = match plan.endpoint {
        Endpoint::Chat => "chat.completion.chunk",
        Endpoint::Completions => "text_completion",
    };
    let usage_chunk = plan.include_usage && !plan.no_usage;
    let event = |choices: Vec<Value>, usage: Option<Value>| {
        let mut chunk = json!({"id": "cmpl-sluice-test", "object": object, "created": 0,
                               "model": plan.model, "choices": choices});
        if usage_chunk {
            chunk["usage"] = usage.unwrap_or(Value::Null);
        }
        format!("data: {chunk}\n\n").into_bytes()
    };
    let parts = plan.completion_tokens.min(MAX_CONTENT_CHUNKS);
    let mut chunks = Vec::new();
    for i in 0..parts {
        // Spread the tokens: the first parts take the remainder.
        let n = plan.completion_tokens / parts + u64::from(i < plan.completion_tokens % parts);
        let piece = if i == 0 {
            text(n)
        } else {
            format!(" {}", text(n))
        };
        chunks.push(event(vec![chunk_choice(plan, Some(&piece), None)], None));
    }
    chunks.push(event(vec![chunk_choice(plan, None, Some("length"))], None));
    if usage_chunk {
        chunks.push(event(Vec::new(), Some(usage(plan))));
    }
    chunks.push(b"data: [DONE]\n\n".to_vec());
    chunks
}
