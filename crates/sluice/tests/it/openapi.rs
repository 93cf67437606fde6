//! The control API's OpenAPI document (`crates/sluice-http/openapi.yaml`):
//! the binary serves it at `GET /openapi.yaml` as `application/yaml`, it is
//! OpenAPI 3.1 of this version, `docs/openapi.yaml` is the same file, and
//! its operations are exactly the routes the control listener's code
//! routes (read from `crates/sluice-http/src`), each of which a running
//! binary answers with a status the document lists for it. So a route
//! added without its documentation, or documented and not served, fails
//! here; scripts/check-openapi checks the rest (bodies, headers, every
//! status) with schemathesis.

use crate::common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use common::{Sluice, client, example_path, send};
use serde_json::Value;

const TOKEN: &str = "openapi-test-token-0123456789abcdef";

/// The methods a route may name (axum's `MethodRouter` constructors).
const METHODS: [&str; 8] = [
    "get", "post", "put", "delete", "patch", "head", "options", "trace",
];

fn sluice_http() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../sluice-http")
}

fn document() -> Value {
    let text = std::fs::read_to_string(sluice_http().join("openapi.yaml")).unwrap();
    serde_yaml_ng::from_str(&text).expect("openapi.yaml is YAML")
}

/// Every `(path, method)` of the document, the path as axum writes it.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut ops = BTreeSet::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            if METHODS.contains(&method.as_str()) {
                ops.insert((path.clone(), method.clone()));
            }
        }
    }
    ops
}

/// The text of the call that starts at `open` (just after its `(`), up
/// to its closing parenthesis.
fn call_at(text: &str, open: usize) -> &str {
    let mut depth = 1;
    for (i, c) in text[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            return &text[open..open + i];
        }
    }
    panic!("unclosed call at {open}")
}

/// The `(path, method)` pairs of every `.route("…", get(…).post(…))` in
/// `code`.
fn routes_in(code: &str, file: &Path, out: &mut BTreeSet<(String, String)>) {
    for (at, _) in code.match_indices(".route(") {
        let call = call_at(code, at + ".route(".len());
        let path = call.split('"').nth(1).unwrap_or_else(|| {
            panic!("{}: a route without a literal path: {call}", file.display())
        });
        assert!(
            !call.contains("any("),
            "{}: `{path}` takes any method: document each",
            file.display()
        );
        let mut found = false;
        for method in METHODS {
            let needle = format!("{method}(");
            for (i, _) in call.match_indices(&needle) {
                let before = call[..i].chars().next_back();
                if !before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                    out.insert((path.to_owned(), method.to_owned()));
                    found = true;
                }
            }
        }
        assert!(found, "{}: no method for `{path}`", file.display());
    }
}

/// Every route of the control listener, read from the code of sluice-http
/// (its tests, comments and the data plane left out).
fn routed() -> BTreeSet<(String, String)> {
    let mut routes = BTreeSet::new();
    let mut dirs = vec![sluice_http().join("src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("data_plane.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code: String = text
                .split("#[cfg(test)]")
                .next()
                .unwrap()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            routes_in(&code, &path, &mut routes);
        }
    }
    routes
}

#[test]
fn the_document_lists_exactly_the_routes_of_the_code() {
    let doc = document();
    let routed = routed();
    // The routes of control.rs and admin.rs at least: the reader works.
    for op in [("/v1/check", "post"), ("/admin/keys/{key}/plan", "delete")] {
        assert!(
            routed.contains(&(op.0.to_owned(), op.1.to_owned())),
            "{routed:?}"
        );
    }
    let documented = documented(&doc);
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty(),
        "routed but not in crates/sluice-http/openapi.yaml: {undocumented:?}"
    );
    assert!(
        unrouted.is_empty(),
        "in crates/sluice-http/openapi.yaml but not routed: {unrouted:?}"
    );
}

#[test]
fn docs_openapi_yaml_is_the_crates_document() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.yaml");
    assert_eq!(
        std::fs::read(&docs).unwrap(),
        std::fs::read(sluice_http().join("openapi.yaml")).unwrap(),
        "docs/openapi.yaml should be a link to ../crates/sluice-http/openapi.yaml"
    );
}

/// A request to `path` by `method`, with the admin token and a body that
/// fits the route (the least it takes).
fn request(sluice: &Sluice, method: &str, path: &str) -> reqwest::RequestBuilder {
    let url = sluice.control_url(&path.replace("{key}", "openapi-test"));
    let body = match path {
        "/v1/check" => r#"{"path": "/", "headers": {"X-Api-Key": "k"}, "client_ip": "192.0.2.1"}"#,
        "/v1/settle" | "/v1/release" | "/v1/renew" => r#"{"reservation": "00"}"#,
        "/admin/keys/{key}/plan" => r#"{"plan": "pro"}"#,
        "/admin/keys/{key}/credits" => r#"{"credits": 5}"#,
        _ => "",
    };
    let method = reqwest::Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
    let mut r = client()
        .request(method.clone(), url)
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("x-original-uri", "/");
    if method == reqwest::Method::POST || method == reqwest::Method::PUT {
        r = r.header("content-type", "application/json").body(body);
    }
    r
}

#[tokio::test]
async fn the_binary_serves_the_document_and_every_route_in_it() {
    let sluice = Sluice::start_env(
        &example_path("quickstart.toml"),
        &[],
        &[("SLUICE_ADMIN_TOKEN", TOKEN)],
    );
    let reply = send(client().get(sluice.control_url("/openapi.yaml"))).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), "application/yaml");
    let text = std::fs::read_to_string(sluice_http().join("openapi.yaml")).unwrap();
    assert_eq!(
        String::from_utf8(reply.body).unwrap(),
        text,
        "the served document is the file"
    );

    let doc: Value = serde_yaml_ng::from_str(&text).unwrap();
    let version = doc["openapi"].as_str().expect("openapi: 3.1.x");
    assert!(version.starts_with("3.1."), "openapi: {version}");
    assert_eq!(doc["info"]["version"], env!("CARGO_PKG_VERSION"));

    for (path, method) in documented(&doc) {
        let reply = send(request(&sluice, &method, &path)).await;
        let responses = doc["paths"][&path][&method]["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{method} {path}: no responses"));
        assert!(
            responses.contains_key(&reply.status.to_string()),
            "{method} {path} answered {}, which the document does not list: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
        // The router's own 404 has no body; a handler's is a problem.
        if reply.status == 404 {
            assert_eq!(
                reply.header("content-type"),
                "application/problem+json",
                "{method} {path} is not routed"
            );
        }
    }
}

/// What schemathesis and a reading of the code found answered otherwise
/// than documented: axum's own `text/plain` refusals (a body over 2 MiB, a
/// key that is not UTF-8), and whole numbers written as `5.0` refused.
#[tokio::test]
async fn refusals_are_problems_and_whole_numbers_are_whole_numbers() {
    let sluice = Sluice::start_env(
        &example_path("quickstart.toml"),
        &[],
        &[("SLUICE_ADMIN_TOKEN", TOKEN)],
    );
    let big = format!(r#"{{"path": "/", "body": "{}"}}"#, "x".repeat(3 << 20));
    let reply = send(request(&sluice, "post", "/v1/check").body(big)).await;
    reply.problem(413);
    let reply = send(
        client()
            .get(sluice.control_url("/admin/keys/%FF/plan"))
            .header("authorization", format!("Bearer {TOKEN}")),
    )
    .await;
    reply.problem(400);

    let check =
        r#"{"path": "/", "headers": {"X-Api-Key": "k"}, "client_ip": "192.0.2.1", "cost": 1.0}"#;
    let reply = send(request(&sluice, "post", "/v1/check").body(check)).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let settle = r#"{"reservation": "00", "cost": 3192.0, "status": 2e2}"#;
    let reply = send(request(&sluice, "post", "/v1/settle").body(settle)).await;
    reply.problem(404);
    let credits = r#"{"credits": 5.0}"#;
    let reply = send(request(&sluice, "put", "/admin/keys/{key}/credits").body(credits)).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json(), serde_json::json!({"credits": 5}));
    for (path, body) in [
        ("/v1/check", r#"{"path": "/", "cost": 1.5}"#),
        ("/v1/settle", r#"{"reservation": "00", "status": 200.5}"#),
        ("/admin/keys/{key}/credits", r#"{"credits": -1.0}"#),
    ] {
        let method = if path.contains("credits") {
            "put"
        } else {
            "post"
        };
        send(request(&sluice, method, path).body(body))
            .await
            .problem(400);
    }
}
