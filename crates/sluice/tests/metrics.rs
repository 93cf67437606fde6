//! `GET /metrics` on the control listener: the exposition parses with the
//! Prometheus client's own parsers (Debian's `python3-prometheus-client`),
//! counts what happened, and never shows a raw key.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::process::{Command, Stdio};

use common::{Sluice, client, example_path, send};
use serde_json::Value;

/// Parses an exposition with the Python client's parsers; `None` when they
/// are not installed (and `SLUICE_REQUIRE_PYTHON_PROM` is not set).
pub fn parse(text: &str) -> Option<Vec<Value>> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/parse_metrics.py"
    );
    let python = "/usr/bin/python3";
    let available = Command::new(python)
        .args(["-c", "import prometheus_client"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !available {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_PYTHON_PROM").is_none(),
            "python3-prometheus-client is required"
        );
        eprintln!("skipping the parser check: python3-prometheus-client is not installed");
        return None;
    }
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser rejected the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Value::Array(samples) = serde_json::from_slice(&out.stdout).unwrap() else {
        panic!("not a list");
    };
    Some(samples)
}

/// The value of the sample named `name` whose labels include `labels`.
pub fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .iter()
                    .all(|(k, v)| s["labels"][*k].as_str() == Some(*v))
        })
        .and_then(|s| s["value"].as_f64())
}

#[tokio::test]
async fn metrics_parse_and_count_what_happened() {
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    for _ in 0..25 {
        send(
            client
                .get(sluice.url("/"))
                .header("X-Api-Key", "alice-secret-key"),
        )
        .await;
    }
    assert_eq!(send(client.get(sluice.url("/"))).await.status, 401);

    let r = send(client.get(sluice.control_url("/metrics"))).await;
    assert_eq!(r.status, 200);
    assert!(
        r.header("content-type")
            .starts_with("application/openmetrics-text")
    );
    let text = String::from_utf8(r.body).unwrap();
    assert!(!text.contains("alice"), "a raw key in the metrics:\n{text}");
    let Some(samples) = parse(&text) else { return };

    let requests = |outcome| value(&samples, "sluice_requests_total", &[("outcome", outcome)]);
    assert_eq!(requests("allowed"), Some(20.0));
    assert_eq!(requests("limited"), Some(5.0));
    assert_eq!(requests("missing_key"), Some(1.0));
    let free = |outcome| {
        value(
            &samples,
            "sluice_decisions_total",
            &[
                ("limit", "free"),
                ("plan", "free"),
                ("endpoint", "*"),
                ("outcome", outcome),
            ],
        )
    };
    assert_eq!(free("allowed"), Some(20.0));
    assert_eq!(free("limited"), Some(5.0));
    assert_eq!(
        value(
            &samples,
            "sluice_decisions_total",
            &[("limit", "ip-guard"), ("outcome", "allowed")]
        ),
        Some(25.0)
    );
    assert_eq!(
        value(&samples, "sluice_limited_within_plan_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &samples,
            "sluice_limited_retry_after_seconds_count",
            &[("limit", "free")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(
            &samples,
            "sluice_top_limited_key_requests",
            &[("rank", "1")]
        ),
        Some(5.0)
    );
    assert_eq!(
        value(&samples, "sluice_store_info", &[("store", "memory")]),
        Some(1.0)
    );
    assert!(samples.iter().any(|s| s["name"] == "sluice_config_info"));
    assert_eq!(
        value(
            &samples,
            "sluice_config_reloads_total",
            &[("result", "failure")]
        ),
        Some(0.0)
    );
}
