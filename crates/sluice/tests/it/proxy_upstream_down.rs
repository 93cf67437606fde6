//! Reverse proxy with the upstream down: an admitted request is answered
//! 502 with an `application/problem+json` body.

use crate::common;

use common::{Sluice, client, proxy_config, send, unused_port};

#[tokio::test]
async fn an_unreachable_upstream_is_a_502_problem() {
    let port = unused_port();
    let sluice = Sluice::start_with(
        "proxy-down",
        &proxy_config(&format!("http://127.0.0.1:{port}")),
    );
    let client = client();
    for _ in 0..2 {
        let reply = send(
            client
                .post(sluice.url("/anything?x=1"))
                .header("X-Api-Key", "k1")
                .body("payload"),
        )
        .await;
        let body = reply.problem(502);
        assert_eq!(body["title"], "Bad Gateway", "{body}");
        // The request was admitted, so it still counts and says so.
        reply.policy();
        reply.ratelimit();
    }
    // Refusals are still refusals, not 502s.
    let no_key = send(client.get(sluice.url("/"))).await;
    no_key.problem(401);
}
