//! Moving a key between plans at run time through the admin API.

use crate::common;

use common::{Sluice, client, example, send};

const TOKEN: &str = "plans-admin-token";

#[tokio::test]
async fn a_key_moves_to_pro_and_back() {
    let s = Sluice::start_with_env(
        "admin-plans",
        &example("quickstart.toml"),
        &[("SLUICE_ADMIN_TOKEN", TOKEN)],
    );
    let c = client();
    let plan_url = |key: &str| s.control_url(&format!("/admin/keys/{key}/plan"));
    let plans_of =
        |r: &common::Reply| -> Vec<String> { r.policy().iter().map(|i| i.name.clone()).collect() };
    let get = || c.get(s.url("/")).header("X-Api-Key", "alice");

    assert_eq!(plans_of(&send(get()).await), ["ip-guard", "free"]);
    let r = send(c.get(plan_url("alice")).bearer_auth(TOKEN)).await;
    assert_eq!(
        (r.json()["plan"].as_str(), r.json()["source"].as_str()),
        (Some("free"), Some("default"))
    );
    let r = send(c.get(plan_url("demo-pro-key")).bearer_auth(TOKEN)).await;
    assert_eq!(r.json()["source"], "config");

    let r = send(
        c.put(plan_url("alice"))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"pro"}"#),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(plans_of(&send(get()).await), ["ip-guard", "pro"]);
    let r = send(c.get(plan_url("alice")).bearer_auth(TOKEN)).await;
    assert_eq!(
        (r.json()["plan"].as_str(), r.json()["source"].as_str()),
        (Some("pro"), Some("runtime"))
    );

    let r = send(
        c.put(plan_url("alice"))
            .bearer_auth(TOKEN)
            .body(r#"{"plan":"platinum"}"#),
    )
    .await;
    assert_eq!(r.status, 422);
    assert_eq!(
        send(c.put(plan_url("alice")).body(r#"{"plan":"free"}"#))
            .await
            .status,
        401
    );
    assert_eq!(
        send(
            c.put(plan_url("alice"))
                .bearer_auth("nope")
                .body(r#"{"plan":"free"}"#)
        )
        .await
        .status,
        403
    );

    assert_eq!(
        send(c.delete(plan_url("alice")).bearer_auth(TOKEN))
            .await
            .status,
        204
    );
    assert_eq!(plans_of(&send(get()).await), ["ip-guard", "free"]);
    assert!(
        !s.log().contains("alice"),
        "raw keys never appear in the log"
    );
}
