//! Deny lists answer 403 problem+json on the data plane; allow lists are
//! never limited.

use crate::common;

use common::{Sluice, client, send};

const CONFIG: &str = r#"
[client]
key = "header:X-Api-Key"

[access]
allow_keys = ["monitoring"]
deny_keys = ["stolen-key"]

[[limits]]
name = "per-key"
key = "header:X-Api-Key"
rate = "1/min"
burst = 1
"#;

#[tokio::test]
async fn deny_is_403_and_allow_is_never_limited() {
    let s = Sluice::start_with("access", CONFIG);
    let c = client();
    let r = send(c.get(s.url("/")).header("X-Api-Key", "stolen-key")).await;
    assert_eq!(r.status, 403);
    assert_eq!(r.header("content-type"), "application/problem+json");
    for _ in 0..5 {
        let r = send(c.get(s.url("/")).header("X-Api-Key", "monitoring")).await;
        assert_eq!(r.status, 200);
    }
    let statuses: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..2 {
            v.push(
                send(c.get(s.url("/")).header("X-Api-Key", "someone"))
                    .await
                    .status,
            );
        }
        v
    };
    assert_eq!(statuses, [200, 429]);
}
