//! Hostile input to the admin routes: the `Bearer` scheme is matched
//! case-insensitively (RFC 9110 §11.1).

use crate::common;

use common::{Reply, Sluice, client, example, send};

const TOKEN: &str = "hostile-admin-token";

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
