//! Config errors name the file, line, column and field.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use sluice_policy::{ConfigError, Policy};

/// A whole config checked, its deployment settings included.
fn compile(text: &str) -> Result<Policy, ConfigError> {
    Policy::from_toml("test.toml", text)
}

fn error(text: &str) -> String {
    compile(text).unwrap_err().to_string()
}

#[test]
fn the_shipped_examples_are_valid() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for name in ["quickstart.toml", "proxy.toml", "plans.toml", "envoy.toml"] {
        Policy::load(&root.join(name)).unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn an_unknown_field_is_located() {
    let e = error("listen = \"127.0.0.1:1\"\n\n[store]\nurl = \"memory://\"\nmax_kyes = 5\n");
    assert!(e.starts_with("test.toml:5:1: "), "{e}");
    assert!(e.contains("max_kyes"), "{e}");
}

#[test]
fn a_bad_rate_points_at_its_value() {
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"10/fortnight\"\n");
    assert!(e.starts_with("test.toml:4:8: "), "{e}");
    assert!(e.contains("fortnight"), "{e}");
}

#[test]
fn a_bad_algorithm_lists_the_choices() {
    let e =
        error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nalgorithm = \"magic\"\n");
    assert!(e.starts_with("test.toml:5:13: "), "{e}");
    assert!(e.contains("gcra"), "{e}");
}

#[test]
fn a_missing_plan_is_located_at_its_reference() {
    let e = error(
        "[client]\nkey = \"header:X-Api-Key\"\ndefault_plan = \"gold\"\n\n[plans.free]\nlimits = [{ rate = \"1/s\" }]\n",
    );
    assert!(e.starts_with("test.toml:3:16: "), "{e}");
    assert!(
        e.contains("client.default_plan") && e.contains("gold"),
        "{e}"
    );
}

#[test]
fn an_impossible_cost_is_refused_at_load() {
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nburst = 2\ncost = 3\n");
    assert!(e.starts_with("test.toml:6:8: "), "{e}");
    assert!(e.contains("cost 3 exceeds burst 2"), "{e}");
}

#[test]
fn a_sliding_log_too_large_is_refused() {
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"70000/day\"\nalgorithm = \"sliding_log\"\n",
    );
    assert!(e.starts_with("test.toml:4:8: "), "{e}");
    assert!(e.contains("burst") && e.contains("too large"), "{e}");
}

#[test]
fn a_zero_burst_points_at_the_burst() {
    let e = error("[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nburst = 0\n");
    assert!(e.starts_with("test.toml:5:9: "), "{e}");
    assert!(e.contains("burst must be at least 1"), "{e}");
}

#[test]
fn a_bad_method_points_at_the_match() {
    let e = error(
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\nmatch = { methods = [\"G ET\"] }\n",
    );
    assert!(e.starts_with("test.toml:5:9: "), "{e}");
    assert!(e.contains("match.methods"), "{e}");
}

#[test]
fn syntax_errors_are_located() {
    let e = error("listen = \"127.0.0.1:1\"\n[store\n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
}

#[test]
fn an_unsupported_store_is_named() {
    let e = error("[store]\nurl = \"mongodb://localhost\"\n");
    assert!(e.starts_with("test.toml:2:7: "), "{e}");
    assert!(e.contains("store.url"), "{e}");
}

#[test]
fn a_bad_redis_url_and_timeout_are_located() {
    let e = error("[store]\nurl = \"redis+cluster://\"\n");
    assert!(e.starts_with("test.toml:2:7: "), "{e}");
    let e = error("[store]\nurl = \"redis://127.0.0.1:6379\"\ntimeout = \"soon\"\n");
    assert!(e.starts_with("test.toml:3:11: "), "{e}");
    assert!(e.contains("store.timeout"), "{e}");
}

#[test]
fn a_config_without_limits_is_refused_unless_it_says_so() {
    let e = error("");
    assert!(e.starts_with("test.toml:1:1: no_limits"), "{e}");
    let e = error("[client]\nkey = \"ip\"\n");
    assert!(e.contains("no_limits = true"), "{e}");
    let p = sluice_policy::Policy::from_toml("test.toml", "no_limits = true\n").unwrap();
    assert!(p.limits().is_empty());
}

#[test]
fn server_settings_are_checked_and_located() {
    let e =
        error("[server]\nheader_read_timeout = \"0s\"\n[[limits]]\nkey = \"ip\"\nrate = \"1/s\"\n");
    assert!(
        e.starts_with("test.toml:2:23: server.header_read_timeout"),
        "{e}"
    );
    let e = error("[server]\nmax_connections = 0\n[[limits]]\nkey = \"ip\"\nrate = \"1/s\"\n");
    assert!(
        e.starts_with("test.toml:2:19: server.max_connections"),
        "{e}"
    );
    let e = error("[client]\nipv6_prefix = 129\n[[limits]]\nkey = \"ip\"\nrate = \"1/s\"\n");
    assert!(e.starts_with("test.toml:2:15: client.ipv6_prefix"), "{e}");
    let p = sluice_policy::Deployment::from_toml(
        "test.toml",
        "[server]\nidle_timeout = \"5s\"\nhttp2_keepalive_interval = \"0s\"\n[[limits]]\nkey = \"ip\"\nrate = \"1/s\"\n",
    )
    .unwrap();
    assert_eq!(
        p.server.data.idle_timeout,
        std::time::Duration::from_secs(5)
    );
    assert_eq!(
        p.server.control.idle_timeout,
        std::time::Duration::from_secs(5)
    );
    assert_eq!(p.server.data.http2_keepalive_interval, None);
}

#[test]
fn store_urls_and_fallbacks_are_accepted() {
    for text in [
        "[store]\nurl = \"redis://u:p@127.0.0.1:6379/2\"\nfallback = \"deny\"\n",
        "[store]\nurl = \"redis+cluster://a:1,b:2\"\ntimeout = \"5ms\"\n",
        "[store]\nurl = \"redis+sentinel://s:26379/main\"\nfallback = \"allow\"\n",
    ] {
        // These configs test the store alone: they say no limits is meant.
        sluice_policy::Policy::from_toml("test.toml", &format!("no_limits = true\n{text}"))
            .unwrap();
    }
    let e = error("[store]\nfallback = \"maybe\"\n");
    assert!(e.starts_with("test.toml:2:"), "{e}");
}

#[test]
fn an_https_upstream_is_refused_for_now() {
    let e = error("upstream = \"ftp://x\"\n");
    assert!(e.starts_with("test.toml:1:12: "), "{e}");
}

#[test]
fn a_global_limit_needs_a_key() {
    let e = error("[[limits]]\nname = \"a\"\nrate = \"1/s\"\n");
    assert!(e.contains("missing field `key`"), "{e}");
}

#[test]
fn an_unreadable_file_is_named() {
    let e = Policy::load(std::path::Path::new("/nonexistent/sluice.toml")).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("/nonexistent/sluice.toml: cannot read"),
        "{e}"
    );
}

#[test]
fn an_envoy_config_list_with_no_file_is_located() {
    let e = error("[envoy]\ngrpc_listen = \"127.0.0.1:0\"\nconfig = []\n");
    assert!(e.starts_with("test.toml:3:10: "), "{e}");
    assert!(e.contains("config"), "{e}");
}

#[test]
fn an_empty_envoy_config_path_is_located() {
    for (toml, column) in [("config = \"\"", 10), ("config = [\"a.yaml\", \" \"]", 10)] {
        let e = error(&format!("[envoy]\ngrpc_listen = \"127.0.0.1:0\"\n{toml}\n"));
        assert!(e.starts_with(&format!("test.toml:3:{column}: ")), "{e}");
        assert!(e.contains("empty path"), "{e}");
    }
}
