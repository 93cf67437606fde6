//! Spellings of a path: every spelling of `/export` is charged to
//! `/export`'s limit (the quick start's 2 per minute per key), on the data
//! plane, `POST /v1/check` and nginx's `/v1/auth`; ambiguous spellings are
//! refused with 400; and the proxy forwards the canonical path.

use crate::common;

use common::{Sluice, Upstream, UpstreamReply, client, example_path, proxy_config, raw_get, send};

const SPELLINGS: [&str; 6] = [
    "//export",
    "/%65xport",
    "/./export",
    "/x/../export",
    "/%2e/export",
    "/export/./",
];

#[tokio::test]
async fn every_spelling_of_export_is_charged_to_export() {
    let s = Sluice::start(&example_path("quickstart.toml"));
    for (i, spelling) in SPELLINGS.iter().enumerate() {
        let key = format!("spell-{i}");
        // Two admitted through the plain path...
        for _ in 0..2 {
            assert_eq!(raw_get(s.data, "/export", &key).await.status, 200);
        }
        // ...then the spelling is refused by the same limit.
        let r = raw_get(s.data, spelling, &key).await;
        assert_eq!(r.status, 429, "{spelling} was admitted:\n{}", r.text);
        assert!(r.text.contains("\"export\""), "{spelling}: {}", r.text);
    }
    // And a spelling spends the plain path's quota.
    for _ in 0..2 {
        assert_eq!(raw_get(s.data, "//export", "spend").await.status, 200);
    }
    assert_eq!(raw_get(s.data, "/export", "spend").await.status, 429);
}

#[tokio::test]
async fn ambiguous_paths_are_refused_with_400() {
    let s = Sluice::start(&example_path("quickstart.toml"));
    for path in [
        "/a%2Fb",
        "/export%2f",
        "/%5Cexport",
        "/../export",
        "/x/%2e%2e/%2e%2e/export",
    ] {
        let r = raw_get(s.data, path, "k").await;
        assert_eq!(r.status, 400, "{path}:\n{}", r.text);
        assert!(r.text.contains("application/problem+json"), "{}", r.text);
    }
}

#[tokio::test]
async fn the_check_api_and_nginx_auth_see_the_canonical_path() {
    let s = Sluice::start(&example_path("quickstart.toml"));
    let c = client();
    for (i, spelling) in SPELLINGS.iter().enumerate() {
        let r = send(c.post(s.control_url("/v1/check")).body(format!(
            r#"{{"path":"{spelling}","headers":{{"X-Api-Key":"check"}},"client_ip":"192.0.2.7","cost":0}}"#
        )))
        .await;
        assert_eq!(
            r.status,
            200,
            "{spelling}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let names: Vec<String> = r.json()["limits"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            names.contains(&"export".to_owned()),
            "{spelling}: {names:?}"
        );
        let r = send(
            c.get(s.control_url("/v1/auth"))
                .header("X-Original-URI", format!("{spelling}?q=1"))
                .header("X-Api-Key", format!("auth-{i}")),
        )
        .await;
        assert_eq!(r.status, 204, "{spelling}");
        assert!(
            r.header("ratelimit").contains("\"export\""),
            "{spelling}: {}",
            r.header("ratelimit")
        );
    }
    let r = send(
        c.post(s.control_url("/v1/check"))
            .body(r#"{"path":"/a%2fb","headers":{"X-Api-Key":"check"}}"#),
    )
    .await;
    r.problem(400);
}

#[tokio::test]
async fn the_proxy_forwards_the_canonical_path() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: std::time::Duration::ZERO,
    });
    let s = Sluice::start_with("canonical-proxy", &proxy_config(&upstream.url()));
    let r = raw_get(s.data, "/x/..//%65xport/./a%2cb?q=%2F", "fwd").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let recorded = upstream.recorded();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].path_and_query, "/export/a%2Cb?q=%2F");
}
