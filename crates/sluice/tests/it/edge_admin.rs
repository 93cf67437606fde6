//! Hostile input to the admin routes: the `Bearer` scheme is matched
//! case-insensitively (RFC 9110 §11.1), and a peer that keeps failing to
//! authenticate is refused with 429 and `Retry-After` before its token is
//! compared, while a correct token from another peer still works.
//!
//! No timing assertions: the failure budget refills one attempt every few
//! seconds, so the loops below allow for a slow machine and only bound the
//! number of attempts as a hang guard.

use crate::common;

use std::net::{IpAddr, Ipv4Addr};

use common::{Reply, Sluice, client, example, send};

const TOKEN: &str = "hostile-admin-token";

/// The failure budget the admin routes document: 10 failures at once.
const BUDGET: usize = 10;

fn start(label: &str) -> Sluice {
    Sluice::start_with_env(
        label,
        &example("quickstart.toml"),
        &[("SLUICE_ADMIN_TOKEN", TOKEN)],
    )
}

/// `GET /admin/keys/alice/plan` with this `Authorization` value (none for
/// `None`), from the default client.
async fn get_plan(s: &Sluice, c: &reqwest::Client, authorization: Option<&str>) -> Reply {
    let mut r = c.get(s.control_url("/admin/keys/alice/plan"));
    if let Some(a) = authorization {
        r = r.header("authorization", a);
    }
    send(r).await
}

/// Sends wrong tokens until one is answered 429 (a hang guard bounds it).
async fn spend_failures_until_limited(s: &Sluice, c: &reqwest::Client) {
    for _ in 0..100 {
        if get_plan(s, c, Some("Bearer wrong")).await.status == 429 {
            return;
        }
    }
    panic!("100 wrong tokens in a row were never limited");
}

/// A client whose connections come from `127.0.0.2`: another peer.
fn client_from_another_peer() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_bearer_scheme_is_case_insensitive() {
    let s = start("hostile-admin-scheme");
    let c = client();
    for authorization in [
        format!("Bearer {TOKEN}"),
        format!("bearer {TOKEN}"),
        format!("BEARER {TOKEN}"),
        format!("bEaReR {TOKEN}"),
        format!("Bearer    {TOKEN}"),
        format!("bearer  {TOKEN}"),
    ] {
        let r = get_plan(&s, &c, Some(&authorization)).await;
        assert_eq!(
            r.status,
            200,
            "{authorization:?}: {}",
            String::from_utf8_lossy(&r.body)
        );
        assert_eq!(r.json()["plan"], "free", "{authorization:?}");
    }
    // Another scheme, or the scheme alone, is still no credentials.
    for authorization in [format!("Basic {TOKEN}"), "Bearer".to_owned()] {
        let r = get_plan(&s, &c, Some(&authorization)).await;
        r.problem(401);
    }
    assert!(!s.log().contains(TOKEN), "the token is never logged");
}

#[tokio::test]
async fn repeated_failures_from_one_peer_get_429_before_the_token_is_compared() {
    let s = start("hostile-admin-failures");
    let c = client();
    let right = format!("Bearer {TOKEN}");

    // Successes do not spend the failure budget.
    for _ in 0..(BUDGET * 2) {
        assert_eq!(get_plan(&s, &c, Some(&right)).await.status, 200);
    }
    // A few failures, then the right token: still let in.
    for _ in 0..3 {
        get_plan(&s, &c, Some("Bearer wrong")).await.problem(403);
    }
    assert_eq!(get_plan(&s, &c, Some(&right)).await.status, 200);

    // Wrong tokens in a row: 403 while the budget lasts, then 429.
    let mut refused = 3;
    let limited = loop {
        let r = get_plan(&s, &c, Some("Bearer wrong")).await;
        match r.status {
            403 => refused += 1,
            429 => break r,
            other => panic!("status {other}: {}", String::from_utf8_lossy(&r.body)),
        }
        assert!(refused < 100, "never limited after {refused} failures");
    };
    assert!(refused >= BUDGET, "limited after only {refused} failures");
    let problem = limited.problem(429);
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("authentication"),
        "{problem}"
    );
    let retry_after = limited.int_header("retry-after");
    assert!(retry_after >= 1, "Retry-After: {retry_after}");

    // While limited, nothing is compared: the right token and no token are
    // refused alike. (Should a slot refill between two requests on a slow
    // machine, spend it and ask again.)
    let mut tries = 0;
    let r = loop {
        let r = get_plan(&s, &c, Some(&right)).await;
        if r.status != 200 {
            break r;
        }
        spend_failures_until_limited(&s, &c).await;
        tries += 1;
        assert!(
            tries < 10,
            "the right token was never refused while limited"
        );
    };
    r.problem(429);
    assert!(r.int_header("retry-after") >= 1);
    let r = loop {
        let r = get_plan(&s, &c, None).await;
        if r.status != 401 {
            break r;
        }
        spend_failures_until_limited(&s, &c).await;
        tries += 1;
        assert!(
            tries < 10,
            "no token was never refused with 429 while limited"
        );
    };
    r.problem(429);

    // Another peer has its own budget: its right token works, its wrong
    // token is a plain 403.
    let other = client_from_another_peer();
    let r = get_plan(&s, &other, Some(&right)).await;
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    get_plan(&s, &other, Some("Bearer wrong"))
        .await
        .problem(403);

    assert!(!s.log().contains(TOKEN), "the token is never logged");
    assert!(!s.log().contains("panicked"), "{}", s.log());
}
