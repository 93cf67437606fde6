//! The crates' layers, as issue 13 draws them: the policy engine and the
//! adapters do not depend on the Redis store (only the binary, the one
//! place a store URL becomes a store, wires it in), and the Envoy service
//! does not depend on the HTTP crate. Read from each crate's manifest, all
//! dependency tables included, so that a dev-dependency cannot slip one in.

#![allow(clippy::unwrap_used, missing_docs)]

use std::path::Path;

/// The `sluice-*` crates a manifest names in any dependency table.
fn sluice_deps(krate: &str) -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("Cargo.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut deps = Vec::new();
    let mut in_deps = false;
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
            continue;
        }
        if in_deps
            && let Some(name) = line.split(['.', '=', ' ']).next()
            && name.starts_with("sluice-")
        {
            deps.push(name.to_owned());
        }
    }
    deps
}

#[test]
fn the_engine_and_the_adapters_do_not_depend_on_redis() {
    for krate in [
        "sluice-store",
        "sluice-protect",
        "sluice-policy",
        "sluice-headers",
        "sluice-http",
        "sluice-envoy",
        "sluice-egress",
        "sluice-sim",
    ] {
        let deps = sluice_deps(krate);
        assert!(
            deps.iter().any(|d| d == "sluice-core"),
            "{krate}: its manifest was not read: {deps:?}"
        );
        assert!(
            !deps.iter().any(|d| d == "sluice-redis"),
            "{krate} depends on sluice-redis: {deps:?}"
        );
    }
    assert!(sluice_deps("sluice").iter().any(|d| d == "sluice-redis"));
}

#[test]
fn the_policy_depends_on_core_and_store_only() {
    let deps = sluice_deps("sluice-policy");
    for d in &deps {
        assert!(
            ["sluice-core", "sluice-store", "sluice-store-url"].contains(&d.as_str()),
            "sluice-policy depends on {d}"
        );
    }
    assert!(deps.iter().any(|d| d == "sluice-store"));
}

#[test]
fn the_envoy_service_does_not_depend_on_the_http_crate() {
    let deps = sluice_deps("sluice-envoy");
    assert!(deps.iter().any(|d| d == "sluice-policy"), "{deps:?}");
    assert!(
        !deps.iter().any(|d| d == "sluice-http"),
        "sluice-envoy depends on sluice-http: {deps:?}"
    );
}
