//! Adaptive overload protection through the real binary, in proxy mode in
//! front of the OpenAI-compatible test upstream, with plans free < pro <
//! enterprise as priority classes: nothing is shed while the upstream is
//! healthy; when its latency degrades the lowest class is shed before any
//! request of the top class; shedding stops soon after it recovers; a shed
//! request gets 503, `Retry-After` and a problem body; the limit, the
//! requests in flight and the sheds per class show in `/metrics` and
//! `/v1/status`.
//!
//! No assertion is on performance: the phases are long enough for the
//! gate's 100 ms windows on a slow machine, and every wait is bounded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::llm_upstream::LlmUpstream;
use crate::common::{Reply, Sluice, client, send};

/// Proxy mode, three plans with rate limits far above the test's load,
/// and `[overload]` with the plans as classes.
fn config(upstream: &LlmUpstream, overload_extra: &str) -> String {
    format!(
        r#"
upstream = "{url}"

[client]
key = "header:X-Api-Key"
default_plan = "free"

[keys]
pro-key = "pro"
ent-key = "enterprise"

[plans.free]
limits = [{{ rate = "100000/s", burst = 100000 }}]
[plans.pro]
limits = [{{ rate = "100000/s", burst = 100000 }}]
[plans.enterprise]
limits = [{{ rate = "100000/s", burst = 100000 }}]

[overload]
classes = ["free", "pro", "enterprise"]
initial_limit = 100
min_limit = 8
max_limit = 400
{overload_extra}
"#,
        url = upstream.url()
    )
}

const BODY: &str = r#"{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}"#;

async fn call(sluice: &Sluice, http: &reqwest::Client, key: &str) -> Reply {
    send(
        http.post(sluice.url("/v1/chat/completions"))
            .header("x-api-key", key)
            .header("content-type", "application/json")
            .body(BODY),
    )
    .await
}

/// What the clients of one class saw.
#[derive(Debug, Default)]
struct Seen {
    ok: AtomicU64,
    shed: AtomicU64,
    /// Milliseconds since the load started at its first 503 (0: none yet).
    first_shed_ms: AtomicU64,
}

/// Clients calling in a loop (a short pause after a 503) until stopped.
struct Load {
    stop: Arc<AtomicBool>,
    seen: Vec<Arc<Seen>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    sample_503: Arc<std::sync::Mutex<Option<Reply>>>,
}

impl Load {
    /// `clients[i]` clients with key `keys[i]`.
    fn start(sluice: &Arc<Sluice>, keys: &[&'static str], clients: &[usize]) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let sample_503 = Arc::new(std::sync::Mutex::new(None));
        let started = Instant::now();
        let http = client();
        let mut seen = Vec::new();
        let mut tasks = Vec::new();
        for (&key, &n) in keys.iter().zip(clients) {
            let s = Arc::new(Seen::default());
            seen.push(s.clone());
            for _ in 0..n {
                let (s, stop, sluice, http) =
                    (s.clone(), stop.clone(), sluice.clone(), http.clone());
                let sample = sample_503.clone();
                tasks.push(tokio::spawn(async move {
                    while !stop.load(Ordering::Relaxed) {
                        let r = call(&sluice, &http, key).await;
                        match r.status {
                            200 => {
                                s.ok.fetch_add(1, Ordering::Relaxed);
                            }
                            503 => {
                                s.shed.fetch_add(1, Ordering::Relaxed);
                                let ms = started.elapsed().as_millis().max(1) as u64;
                                let _ = s.first_shed_ms.compare_exchange(
                                    0,
                                    ms,
                                    Ordering::Relaxed,
                                    Ordering::Relaxed,
                                );
                                sample.lock().unwrap().get_or_insert(r);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            other => panic!("unexpected status {other}: {:?}", r.body),
                        }
                    }
                }));
            }
        }
        Self {
            stop,
            seen,
            tasks,
            sample_503,
        }
    }

    fn shed(&self, class: usize) -> u64 {
        self.seen[class].shed.load(Ordering::Relaxed)
    }

    fn ok(&self, class: usize) -> u64 {
        self.seen[class].ok.load(Ordering::Relaxed)
    }

    fn total_shed(&self) -> u64 {
        (0..self.seen.len()).map(|k| self.shed(k)).sum()
    }

    async fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            tokio::time::timeout(Duration::from_secs(15), t)
                .await
                .expect("a client stops")
                .expect("a client does not panic");
        }
    }
}

async fn status(sluice: &Sluice) -> Value {
    send(client().get(sluice.control_url("/v1/status")))
        .await
        .json()
}

async fn metrics(sluice: &Sluice) -> String {
    let r = send(client().get(sluice.control_url("/metrics"))).await;
    String::from_utf8(r.body).expect("utf-8 metrics")
}

/// The value of the series `name{labels}` (exactly as written), if any.
fn series(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lowest_class_is_shed_first_when_the_upstream_slows_and_none_once_it_recovers() {
    let upstream = LlmUpstream::start();
    upstream.set_latency(Duration::from_millis(50));
    let sluice = Arc::new(Sluice::start_with("overload", &config(&upstream, "")));
    let keys = ["free-key", "pro-key", "ent-key"];

    // Healthy: 14 clients, well under the lowest class's share.
    let load = Load::start(&sluice, &keys, &[8, 4, 2]);
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert_eq!(load.total_shed(), 0, "nothing is shed while healthy");
    assert!(load.ok(0) > 0 && load.ok(2) > 0);

    // Degraded: every answer 8 times slower. The limit comes down, and the
    // free class is shed; with min_limit 8 and two enterprise clients,
    // enterprise stays under its threshold.
    upstream.set_latency(Duration::from_millis(400));
    let deadline = Instant::now() + Duration::from_secs(6);
    while load.shed(0) == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let (free_shed, ent_shed) = (load.shed(0), load.shed(2));
    assert!(
        free_shed > 0,
        "the free class is shed once the upstream slows"
    );
    let first = |k: usize| load.seen[k].first_shed_ms.load(Ordering::Relaxed);
    assert!(
        ent_shed == 0 || first(0) < first(2),
        "free first shed at {} ms, enterprise at {} ms",
        first(0),
        first(2)
    );
    assert!(load.shed(0) >= load.shed(2));

    // The 503: Retry-After in whole seconds, a problem body.
    let reply = load
        .sample_503
        .lock()
        .unwrap()
        .clone()
        .expect("a 503 was kept");
    let body = reply.problem(503);
    assert_eq!(body["type"], "urn:sluice:problem:overloaded", "{body}");
    assert!(reply.int_header("retry-after") >= 1);
    assert_eq!(body["retry_after"], reply.int_header("retry-after"));

    // Visible: the limit came down, and the sheds show per class.
    let m = metrics(&sluice).await;
    let limit = series(&m, "sluice_overload_limit").expect("the limit series");
    assert!((8.0..100.0).contains(&limit), "limit {limit}\n{m}");
    let shed_free = series(&m, "sluice_overload_shed_total{class=\"free\"}").unwrap();
    assert!(shed_free >= 1.0, "{m}");
    assert!(series(&m, "sluice_overload_in_flight{class=\"enterprise\"}").is_some());
    assert!(series(&m, "sluice_overload_admitted_total{class=\"pro\"}").unwrap() > 0.0);
    assert!(series(&m, "sluice_overload_min_latency_seconds").unwrap() > 0.0);
    let s = status(&sluice).await;
    let o = &s["overload"];
    assert_eq!(o["classes"][0]["name"], "free", "{s}");
    assert_eq!(o["classes"][2]["name"], "enterprise", "{s}");
    assert!(o["classes"][0]["shed"].as_u64().unwrap() >= 1, "{s}");
    assert!(o["limit"].as_u64().is_some() && o["in_flight"].as_u64().is_some());

    // Recovered: shedding stops soon, and stays stopped for a second.
    upstream.set_latency(Duration::from_millis(50));
    let deadline = Instant::now() + Duration::from_secs(8);
    loop {
        let before = load.total_shed();
        tokio::time::sleep(Duration::from_millis(1_000)).await;
        if load.total_shed() == before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still shedding 8 s after the upstream recovered: {:?}",
            status(&sluice).await["overload"]
        );
    }
    load.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_per_class_shows_and_a_waiting_plan_waits_for_room() {
    let upstream = LlmUpstream::start();
    // A fixed, tiny limit: two in flight at most, one for free.
    let extra = "initial_limit = 2\nmin_limit = 2\nmax_limit = 2\n\
                 [overload.plans.enterprise]\non_overload = \"wait\"\nmax_wait = \"1s\"";
    let text = config(&upstream, extra)
        .replace("initial_limit = 100\nmin_limit = 8\nmax_limit = 400\n", "");
    let sluice = Arc::new(Sluice::start_with("overload-flight", &text));
    upstream.hold();
    let http = client();
    let pro = tokio::spawn({
        let (s, h) = (sluice.clone(), http.clone());
        async move { call(&s, &h, "pro-key").await }
    });
    upstream.wait_in_flight(1).await;
    // The free class's share (1 of 2) is in use: shed at once.
    let shed = call(&sluice, &http, "free-key").await;
    shed.problem(503);
    let ent = tokio::spawn({
        let (s, h) = (sluice.clone(), http.clone());
        async move { call(&s, &h, "ent-key").await }
    });
    upstream.wait_in_flight(2).await;

    let m = metrics(&sluice).await;
    assert_eq!(series(&m, "sluice_overload_limit"), Some(2.0), "{m}");
    assert_eq!(
        series(&m, "sluice_overload_in_flight{class=\"pro\"}"),
        Some(1.0)
    );
    assert_eq!(
        series(&m, "sluice_overload_in_flight{class=\"enterprise\"}"),
        Some(1.0)
    );
    assert_eq!(
        series(&m, "sluice_overload_shed_total{class=\"free\"}"),
        Some(1.0)
    );
    let s = status(&sluice).await;
    assert_eq!(s["overload"]["in_flight"], 2, "{s}");

    // The limit is full: enterprise waits (up to 1 s) for room, and gets
    // in when the held requests end.
    let waiting = tokio::spawn({
        let (s, h) = (sluice.clone(), http.clone());
        async move { call(&s, &h, "ent-key").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    upstream.release();
    assert_eq!(pro.await.unwrap().status, 200);
    assert_eq!(ent.await.unwrap().status, 200);
    assert_eq!(
        waiting.await.unwrap().status,
        200,
        "the waiting request got in"
    );
    // Every place was given back once the bodies were read.
    let deadline = Instant::now() + Duration::from_secs(5);
    while status(&sluice).await["overload"]["in_flight"] != 0 {
        assert!(Instant::now() < deadline, "requests stay in flight");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn without_an_overload_table_nothing_is_gated() {
    let upstream = LlmUpstream::start();
    let text = config(&upstream, "").replace(
        "[overload]\nclasses = [\"free\", \"pro\", \"enterprise\"]\ninitial_limit = 100\nmin_limit = 8\nmax_limit = 400\n",
        "",
    );
    assert!(!text.contains("[overload]"));
    let sluice = Sluice::start_with("overload-off", &text);
    assert_eq!(call(&sluice, &client(), "free-key").await.status, 200);
    assert_eq!(status(&sluice).await["overload"], Value::Null);
    assert!(!metrics(&sluice).await.contains("sluice_overload_limit"));
}
