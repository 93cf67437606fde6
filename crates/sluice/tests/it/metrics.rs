//! `GET /metrics` on the control listener: the exposition parses with the
//! Prometheus client's own parsers (Debian's `python3-prometheus-client`),
//! counts what happened, and never shows a raw key.

use crate::common;

use common::prom::{parse, value};
use common::{Sluice, client, send};

#[tokio::test]
async fn metrics_parse_and_count_what_happened() {
    // The quick start, with the free plan refilling too slowly for a busy
    // test machine to let a 21st request through while the 25 are sent.
    let sluice = Sluice::start_with(
        "metrics",
        &common::replace_once(
            &common::example("quickstart.toml"),
            "rate = \"10/s\", burst = 20",
            "rate = \"10/h\", burst = 20",
        ),
    );
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
