//! deploy/nginx/auth_request.conf with Debian's real nginx: nginx asks
//! `sluice serve` (GET /v1/auth) before proxying to an upstream.

use crate::common;

use common::nginx::{Nginx, binary};
use common::{Sluice, Upstream, UpstreamReply, client, send, sf_item};
use std::time::Duration;

const CONFIG: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"
trusted_proxies = ["127.0.0.1/32"]

[plans.free]
limits = [{ rate = "1/min", burst = 3 }]

[[limits]]
name = "ip-guard"
key = "ip"
rate = "1/min"
burst = 6
"#;

fn setup() -> Option<(Sluice, Upstream, Nginx)> {
    let nginx = binary()?;
    let sluice = Sluice::start_with("nginx-auth", CONFIG);
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::ZERO,
    });
    let nginx = Nginx::auth_request(&nginx, &sluice, &upstream);
    Some((sluice, upstream, nginx))
}

#[tokio::test]
async fn nginx_admits_through_sluice_then_answers_429_and_never_forwards_refusals() {
    let Some((_sluice, upstream, nginx)) = setup() else {
        return;
    };
    let c = client();
    let url = nginx.url("/items?page=2");
    for left in (0..3).rev() {
        let r = send(c.get(&url).header("X-Api-Key", "alice")).await;
        assert_eq!(r.status, 200, "{}", nginx.error_log());
        assert_eq!(r.body, common::UPSTREAM_BODY.as_bytes());
        assert_eq!(sf_item(&r.ratelimit(), "free").param("r"), left);
        assert_eq!(sf_item(&r.policy(), "free").param("q"), 3);
    }
    for _ in 0..2 {
        let r = send(c.get(&url).header("X-Api-Key", "alice")).await;
        assert_eq!(r.status, 429, "{}", nginx.error_log());
        assert_eq!(r.int_header("retry-after"), 60);
        assert_eq!(sf_item(&r.ratelimit(), "free").param("r"), 0);
        let problem = r.problem(429);
        assert_eq!(problem["violated-policies"][0], "free");
    }
    assert_eq!(
        upstream.arrived(),
        3,
        "refused requests never reach the upstream"
    );
    let seen = upstream.recorded();
    assert_eq!(seen[0].path_and_query, "/items?page=2");
}

#[tokio::test]
async fn a_request_without_a_key_gets_401_problem_json() {
    let Some((_sluice, upstream, nginx)) = setup() else {
        return;
    };
    let r = send(client().get(nginx.url("/"))).await;
    assert_eq!(r.status, 401, "{}", nginx.error_log());
    assert_eq!(r.header("content-type"), "application/problem+json");
    assert!(r.json()["detail"].as_str().unwrap().contains("x-api-key"));
    assert_eq!(upstream.arrived(), 0);
}

#[tokio::test]
async fn a_client_forging_x_forwarded_for_gains_nothing() {
    let Some((_sluice, upstream, nginx)) = setup() else {
        return;
    };
    let c = client();
    // Six keys, each with its own forged address: the ip-guard still sees
    // one client (nginx's peer) and stops it after its burst of 6.
    let mut statuses = Vec::new();
    for i in 0..8 {
        let r = send(
            c.get(nginx.url("/"))
                .header("X-Api-Key", format!("key-{i}"))
                .header("X-Forwarded-For", format!("198.51.100.{i}")),
        )
        .await;
        statuses.push(r.status);
        if r.status == 429 {
            assert_eq!(r.problem(429)["violated-policies"][0], "ip-guard");
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 200, 429, 429]);
    assert_eq!(upstream.arrived(), 6);
}
