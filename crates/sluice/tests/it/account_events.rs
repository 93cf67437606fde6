//! Account-manager events: a key limited more than N times within its
//! plan's window raises one event (logged, and POSTed to the webhook with
//! retries), never one per request.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use common::{Sluice, client, example, replace_once, send};

#[derive(Default)]
struct Hook {
    attempts: Mutex<Vec<serde_json::Value>>,
}

/// Fails the first attempt (500), accepts the rest.
async fn hook(State(h): State<Arc<Hook>>, body: axum::body::Bytes) -> StatusCode {
    let mut attempts = h.attempts.lock().unwrap();
    attempts.push(serde_json::from_slice(&body).unwrap());
    if attempts.len() == 1 {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        StatusCode::NO_CONTENT
    }
}

#[tokio::test]
async fn a_key_over_its_plan_ceiling_raises_one_event_per_window() {
    let h = Arc::new(Hook::default());
    let app = axum::Router::new()
        .route("/hook", post(hook))
        .with_state(h.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let text = replace_once(
        &example("quickstart.toml"),
        "[plans.pro]",
        &format!(
            "alert = {{ limited = 3, window = \"1h\" }}\n\n[events]\nwebhook = \"http://{addr}/hook\"\n\n[plans.pro]"
        ),
    );
    let sluice = Sluice::start_with("account-events", &text);
    let client = client();
    let mut refused = 0;
    for _ in 0..40 {
        let r = send(
            client
                .get(sluice.url("/"))
                .header("X-Api-Key", "bob-raw-key"),
        )
        .await;
        refused += u32::from(r.status == 429);
    }
    assert!(refused >= 10, "{refused} refusals");

    // Hang guard while the retry goes out.
    let started = Instant::now();
    while h.attempts.lock().unwrap().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no retry reached the webhook"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // More refusals in the same window raise nothing new.
    for _ in 0..10 {
        send(
            client
                .get(sluice.url("/"))
                .header("X-Api-Key", "bob-raw-key"),
        )
        .await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let attempts = h.attempts.lock().unwrap().clone();
    assert_eq!(
        attempts.len(),
        2,
        "one event, sent twice (one retry): {attempts:?}"
    );
    assert_eq!(attempts[0], attempts[1]);
    let e = &attempts[0];
    assert_eq!(e["event"], "plan_ceiling");
    assert_eq!(e["plan"], "free");
    assert_eq!(e["limit"], "free");
    assert_eq!(e["limited"], 4);
    assert_eq!(e["window_seconds"], 3600);
    assert_eq!(e["key"].as_str().unwrap().len(), 16);
    assert!(
        !e.to_string().contains("bob"),
        "a raw key in the event: {e}"
    );

    let log = sluice.log();
    assert_eq!(
        log.matches("keeps hitting its plan's ceiling").count(),
        1,
        "{log}"
    );
    let metrics = send(client.get(sluice.control_url("/metrics"))).await;
    let metrics = String::from_utf8(metrics.body).unwrap();
    assert!(
        metrics.contains("sluice_account_events_total{result=\"delivered\"} 1"),
        "{metrics}"
    );
}
