//! Costs settled after the request through the decision API: `POST
//! /v1/check` reserves an estimate and hands out a reservation id, `POST
//! /v1/settle` charges or gives back the difference. A settlement past
//! what is left puts the key into debt, which refuses its next checks until
//! the rate has paid it off; an unknown id is 404, a second settlement 409.

use crate::common;

use common::{Reply, Sluice, client, post_control, send};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[[limits]]
name = "tokens"
key = "header:X-Api-Key"
rate = "1000/min"
burst = 1000
cost = 100
settle = { from = "reported", estimate = "header:X-Max-Tokens", max_debt = 500, refund_status = ["5xx"] }
"#;

async fn check(sluice: &Sluice, key: &str, estimate: Option<u64>) -> Reply {
    let mut headers = json!({ "X-Api-Key": key });
    if let Some(e) = estimate {
        headers["X-Max-Tokens"] = json!(e.to_string());
    }
    post_control(
        sluice,
        "/v1/check",
        &json!({ "path": "/v1/chat/completions", "method": "POST", "headers": headers }),
    )
    .await
}

fn remaining(reply: &Reply) -> u64 {
    reply.json()["limits"][0]["remaining"].as_u64().unwrap()
}

fn reservation(reply: &Reply) -> String {
    let body = reply.json();
    body["reservation"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no reservation: {body}"))
        .to_owned()
}

#[tokio::test]
async fn a_check_reserves_its_estimate_and_a_settlement_moves_the_difference() {
    // Nothing comes back while the test runs (it waits for a log line): a
    // month's worth per month.
    let config = CONFIG.replace("1000/min", "1000/30d");
    let sluice = Sluice::start_with("settle-api", &config);
    let first = check(&sluice, "alice", None).await;
    assert_eq!(first.status, 200);
    assert_eq!(remaining(&first), 900, "the limit's cost is the estimate");
    let body = first.json();
    assert_eq!(body["reservation"]["expires_in_ms"], 600_000, "{body}");
    let id = reservation(&first);
    assert_eq!(id.len(), 32);

    // 40 used: 60 given back.
    let settled = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": id, "cost": 40 }),
    )
    .await;
    assert_eq!(settled.status, 200, "{}", settled.json());
    let s = &settled.json()["settled"][0];
    assert_eq!(
        (
            s["name"].as_str(),
            s["charged"].as_u64(),
            s["actual"].as_u64(),
            s["refunded"].as_u64()
        ),
        (Some("tokens"), Some(100), Some(40), Some(60))
    );
    // Settled once only.
    let again = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": id, "cost": 40 }),
    )
    .await;
    again.problem(409);
    // Ids never issued, or not ids at all.
    let unknown = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": "0".repeat(32) }),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let garbage = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": "../../etc" }),
    )
    .await;
    assert_eq!(garbage.status, 404);
    for bad in [
        json!({}),
        json!({ "reservation": id, "cost": -1 }),
        json!({ "reservation": id, "status": 700 }),
        json!({ "reservation": id, "extra": 1 }),
    ] {
        assert_eq!(
            post_control(&sluice, "/v1/settle", &bad).await.status,
            400,
            "{bad}"
        );
    }

    // An estimate that is not a whole number is ignored (the limit's cost
    // stands), and logged.
    let bad = post_control(
        &sluice,
        "/v1/check",
        &json!({"path": "/v1/chat/completions", "method": "POST",
                "headers": {"X-Api-Key": "alice", "X-Max-Tokens": "-5"}}),
    )
    .await;
    assert_eq!(remaining(&bad), 1000 - 40 - 100);
    sluice
        .log_says("a cost that is not a whole number was ignored")
        .await;
    let back = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": reservation(&bad), "cost": 0 }),
    )
    .await;
    assert_eq!(back.json()["settled"][0]["refunded"], 100);

    // The estimate named by the request: 200 of what is left.
    let second = check(&sluice, "alice", Some(200)).await;
    assert_eq!(remaining(&second), 1000 - 40 - 200);
    // A 503 gives the whole estimate back, whatever the cost.
    let failed = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": reservation(&second), "cost": 150, "status": 503 }),
    )
    .await;
    assert_eq!(failed.json()["settled"][0]["refunded"], 200);
    assert_eq!(
        remaining(&check(&sluice, "alice", Some(1)).await),
        1000 - 40 - 1
    );
}

#[tokio::test]
async fn a_settlement_past_empty_refuses_the_key_until_its_debt_is_paid() {
    let sluice = Sluice::start_with("settle-debt", CONFIG);
    let first = check(&sluice, "bob", Some(1000)).await;
    assert_eq!(remaining(&first), 0);
    // 1000 more than the estimate: 500 into debt, 500 beyond max_debt.
    let settled = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": reservation(&first), "cost": 2000 }),
    )
    .await;
    let s = &settled.json()["settled"][0];
    assert_eq!(
        (
            s["debited"].as_u64(),
            s["into_debt"].as_u64(),
            s["excess"].as_u64()
        ),
        (Some(500), Some(500), Some(500)),
        "{s}"
    );

    let refused = check(&sluice, "bob", Some(1)).await;
    assert_eq!(refused.status, 429);
    let body = refused.json();
    assert!(
        body.get("reservation").is_none(),
        "a refusal reserves nothing: {body}"
    );
    assert_eq!(body["limits"][0]["remaining"], 0);
    // 501 at 1000/min: about 30 s, counting the debt.
    let retry = body["retry_after_ms"].as_u64().unwrap();
    assert!((30_000..=30_100).contains(&retry), "{retry}");
    assert!(refused.int_header("retry-after") >= 30);
    // The RateLimit field counts the debt too: nothing left, and `t` the
    // seconds until the debt and the next request's 1 are paid off.
    let field = refused.header("ratelimit");
    assert!(field.starts_with("\"tokens\";r=0;t="), "{field}");
    let t: u64 = field.rsplit("t=").next().unwrap().parse().unwrap();
    assert!((30..=31).contains(&t), "{field}");

    // Another key is untouched: a settlement moves only its own.
    assert_eq!(remaining(&check(&sluice, "carol", Some(1)).await), 999);

    let metrics = String::from_utf8(
        send(client().get(sluice.control_url("/metrics")))
            .await
            .body,
    )
    .unwrap();
    assert!(
        metrics.contains("sluice_settlements_total{limit=\"tokens\",result=\"excess\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_settled_cost_total{limit=\"tokens\",direction=\"excess\"} 500"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_reservations_total{event=\"opened\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("sluice_reservations_open 1"), "{metrics}");
    // The status page shows the same.
    let status = send(client().get(sluice.control_url("/v1/status")))
        .await
        .json();
    let t = &status["settlements"];
    assert_eq!(t["reservations_open"], 1, "{status}");
    assert!(
        t["next_expiry_ms"].as_u64().is_some_and(|ms| ms <= 600_000),
        "{status}"
    );
    assert_eq!(t["limits"]["tokens"]["excess"], 1, "{status}");
    assert_eq!(t["limits"]["tokens"]["cost_excess"], 500, "{status}");
    // bob is in debt now, by 500 (paid off in 30 s at 1000/min), on the
    // status page and in the metrics alike.
    assert_eq!(t["limits"]["tokens"]["keys_in_debt"], 1, "{status}");
    let debt = t["limits"]["tokens"]["debt_now"].as_u64().unwrap();
    assert!((480..=500).contains(&debt), "{status}");
    assert!(
        metrics.contains("sluice_keys_in_debt{limit=\"tokens\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_debt{limit=\"tokens\"} "),
        "{metrics}"
    );
}

/// `estimate = "json:<field>"`: a check names the request's JSON body (or
/// its top-level numbers), and the first field it has is the estimate; a
/// header may stand in after it.
#[tokio::test]
async fn a_check_reads_its_estimate_from_the_request_body_it_describes() {
    let config = CONFIG.replace("1000/min", "1000/30d").replace(
        "estimate = \"header:X-Max-Tokens\"",
        "estimate = \"json:max_completion_tokens|json:max_tokens|header:X-Max-Tokens\"",
    );
    let sluice = Sluice::start_with("settle-api-body", &config);
    let with_body = |key: &str, body: Value| {
        json!({
            "path": "/v1/chat/completions",
            "method": "POST",
            "headers": { "X-Api-Key": key, "X-Max-Tokens": "7" },
            "body": body,
        })
    };
    let reply = post_control(
        &sluice,
        "/v1/check",
        &with_body(
            "a",
            json!({"model": "m", "max_tokens": 300, "messages": []}),
        ),
    )
    .await;
    assert_eq!(remaining(&reply), 700, "max_tokens is the estimate");
    let reply = post_control(
        &sluice,
        "/v1/check",
        &with_body("b", json!({"max_tokens": 300, "max_completion_tokens": 40})),
    )
    .await;
    assert_eq!(remaining(&reply), 960, "the first field named stands");
    let reply = post_control(
        &sluice,
        "/v1/check",
        &with_body(
            "c",
            json!({"max_tokens": "300", "max_completion_tokens": -1}),
        ),
    )
    .await;
    assert_eq!(remaining(&reply), 993, "no whole number: the header");
    let reply = post_control(
        &sluice,
        "/v1/check",
        &with_body("d", json!({"max_tokens": 1e9})),
    )
    .await;
    assert_eq!(remaining(&reply), 993, "not a whole number: the header");
    let reply = post_control(
        &sluice,
        "/v1/check",
        &with_body("e", json!({"max_tokens": 99_999_999})),
    )
    .await;
    assert_eq!(remaining(&reply), 0, "within the burst");
}

/// A settlement that comes after its reservation expired is told 409 (the
/// reservation was settled at its estimate then) and counted as late; one
/// for an id never issued is 404 and counted as unknown. Both show on the
/// status page and in the metrics.
#[tokio::test]
async fn a_settlement_after_the_reservation_expired_is_late() {
    let config = format!(
        "[server]\nreservation_ttl = \"200ms\"\n{}",
        CONFIG.replace("1000/min", "1000/30d")
    );
    let sluice = Sluice::start_with("settle-late", &config);
    let first = check(&sluice, "dora", Some(300)).await;
    assert_eq!(remaining(&first), 700);
    let id = reservation(&first);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let late = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": id, "cost": 1 }),
    )
    .await;
    let problem = late.problem(409);
    assert!(
        problem["detail"].as_str().unwrap().contains("expired"),
        "{problem}"
    );
    let unknown = post_control(
        &sluice,
        "/v1/settle",
        &json!({ "reservation": "0".repeat(32) }),
    )
    .await;
    assert_eq!(unknown.status, 404);
    let status = send(client().get(sluice.control_url("/v1/status")))
        .await
        .json();
    let t = &status["settlements"];
    assert_eq!(
        (
            t["settled_late"].as_u64(),
            t["settled_unknown"].as_u64(),
            t["reservations_expired"].as_u64()
        ),
        (Some(1), Some(1), Some(1)),
        "{t}"
    );
    let metrics = String::from_utf8(
        send(client().get(sluice.control_url("/metrics")))
            .await
            .body,
    )
    .unwrap();
    assert!(
        metrics
            .lines()
            .any(|l| l == "sluice_reservations_total{event=\"late\"} 1"),
        "{metrics}"
    );
    // The estimate stood: 300 of the 1000 are still used.
    assert_eq!(remaining(&check(&sluice, "dora", Some(1)).await), 699);
}
