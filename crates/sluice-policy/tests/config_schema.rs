//! The JSON Schema of `sluice.toml`, `docs/sluice.schema.json`: generated
//! from the config types (this test writes it with `SLUICE_BLESS=1`), kept
//! in step with them, and every example config valid against it.
//!
//! Regenerate it after changing a config type:
//!
//! ```text
//! SLUICE_BLESS=1 cargo test -p sluice-policy --test config_schema
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use sluice_policy::config::{Config, json_schema};
use sluice_policy::{Deployment, Policy, Source};

const REGENERATE: &str = "SLUICE_BLESS=1 cargo test -p sluice-policy --test config_schema";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schema_path() -> PathBuf {
    repo_root().join("docs/sluice.schema.json")
}

/// The schema as the file holds it: pretty JSON, one newline at the end.
fn generated() -> String {
    let schema = serde_json::to_string_pretty(&json_schema()).expect("a schema is JSON");
    format!("{schema}\n")
}

/// The committed schema, compiled.
fn validator() -> jsonschema::Validator {
    let path = schema_path();
    let text = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; generate it with `{REGENERATE}`", path.display()));
    let schema: Value = serde_json::from_str(&text).expect("the schema file is JSON");
    jsonschema::meta::validate(&schema).expect("the schema is a valid JSON Schema");
    jsonschema::validator_for(&schema).expect("the schema compiles")
}

/// A TOML document as JSON, as an editor sees it.
fn as_json(toml_text: &str) -> Value {
    toml::from_str(toml_text).expect("the test's TOML is TOML")
}

/// The schema's complaints about `instance`, one a line; empty if valid.
fn errors(validator: &jsonschema::Validator, instance: &Value) -> String {
    validator
        .iter_errors(instance)
        .map(|e| format!("  at `{}`: {e}\n", e.instance_path()))
        .collect()
}

#[test]
fn the_committed_schema_is_the_one_the_config_types_generate() {
    let want = generated();
    let path = schema_path();
    if std::env::var_os("SLUICE_BLESS").is_some() {
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, &want).expect("write the schema");
        fs::rename(&tmp, &path).expect("put the schema in place");
        eprintln!("wrote {}", path.display());
        return;
    }
    let have = fs::read_to_string(&path).unwrap_or_default();
    if have != want {
        let line = have
            .lines()
            .zip(want.lines())
            .position(|(h, w)| h != w)
            .map_or_else(
                || have.lines().count().min(want.lines().count()) + 1,
                |i| i + 1,
            );
        panic!(
            "docs/sluice.schema.json is not the schema the config types generate \
             (they differ from line {line}); regenerate it with\n\n    {REGENERATE}\n\n\
             and commit it"
        );
    }
}

#[test]
fn the_schema_names_itself_and_refuses_unknown_keys() {
    let schema: Value = serde_json::to_value(json_schema()).expect("JSON");
    assert_eq!(schema["title"], "Sluice configuration (sluice.toml)");
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    // The `$id` is where the repository keeps the file.
    let workspace: toml::Table =
        toml::from_str(&fs::read_to_string(repo_root().join("Cargo.toml")).expect("Cargo.toml"))
            .expect("Cargo.toml is TOML");
    let repository = workspace["workspace"]["package"]["repository"]
        .as_str()
        .expect("the workspace names its repository");
    assert_eq!(
        schema["$id"],
        format!("{repository}/docs/sluice.schema.json"),
        "SCHEMA_ID should follow the workspace's repository"
    );
    assert_eq!(schema["additionalProperties"], false);
    for table in [
        "StoreConfig",
        "LimitConfig",
        "PlanConfig",
        "MatchConfig",
        "SettleConfig",
    ] {
        assert_eq!(
            schema["$defs"][table]["additionalProperties"], false,
            "{table} refuses unknown keys, and its schema should say so"
        );
    }
    // TOML has no null: no key offers one.
    assert!(!schema.to_string().contains("\"null\""));
}

/// Whole Sluice configs in the repository: `examples/*.toml`, and any
/// `sluice.toml` (or `*.sluice.toml`) under `examples/` and `deploy/`.
/// Other TOML (`Cargo.toml`, keys files) is not a config.
fn whole_configs() -> Vec<PathBuf> {
    fn walk(dir: &Path, top: bool, found: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if name != "target" && !name.starts_with('.') {
                    walk(&path, false, found);
                }
            } else if name == "sluice.toml"
                || name.ends_with(".sluice.toml")
                || (top && name.ends_with(".toml") && name != "Cargo.toml")
            {
                found.push(path);
            }
        }
    }
    let root = repo_root();
    let mut found = Vec::new();
    walk(&root.join("examples"), true, &mut found);
    walk(&root.join("deploy"), false, &mut found);
    found.sort();
    found
}

#[test]
fn every_example_config_validates_against_the_committed_schema() {
    let validator = validator();
    let configs = whole_configs();
    assert!(
        configs
            .iter()
            .any(|p| p.ends_with("examples/quickstart.toml")),
        "the examples were not found: {configs:?}"
    );
    let mut failures = String::new();
    for path in &configs {
        let text = fs::read_to_string(path).expect("read the example");
        let found = errors(&validator, &as_json(&text));
        if !found.is_empty() {
            failures.push_str(&format!("{}:\n{found}", path.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "examples the schema refuses:\n{failures}"
    );
}

/// A small config that loads, for the cases below to change.
const VALID: &str = r#"
listen = "127.0.0.1:8080"

[store]
url = "memory://"
timeout = "10ms"

[client]
key = "header:X-Api-Key"
default_plan = "free"
trusted_proxies = ["10.0.0.0/8"]

[plans.free]
limits = [{ rate = "10/s", burst = 20, match = { path_prefix = "/api" } }]

[[limits]]
name = "ip-guard"
key = "ip"
algorithm = "gcra"
rate = "1000/s"
on_limit = "delay"
max_delay = "500ms"
settle = { from = "header:X-Cost", refund_status = ["5xx", 429] }
"#;

#[test]
fn a_valid_config_passes_and_a_misspelled_key_does_not() {
    let validator = validator();
    assert_eq!(errors(&validator, &as_json(VALID)), "");
    assert!(
        toml::from_str::<Config>(VALID).is_ok(),
        "the types load it too"
    );

    // Each change makes the config one the types refuse; so must the schema.
    let wrong = [
        ("listen =", "listne ="),                         // top level
        ("url =", "ulr ="),                               // [store]
        ("default_plan", "defualt_plan"),                 // [client]
        ("burst = 20", "brust = 20"),                     // a plan's inline limit
        ("path_prefix", "path_prefx"),                    // a limit's match
        ("name = \"ip-guard\"", "nmae = \"ip-guard\""),   // [[limits]]
        ("refund_status", "refund_statuses"),             // settle
        ("\"delay\"", "\"dealy\""),                       // an enum's value
        ("\"gcra\"", "\"gcra2\""),                        // an algorithm
        ("burst = 20", "burst = \"20\""),                 // a type
        ("\"10/s\"", "\"10\""),                           // a rate's syntax
        ("\"header:X-Api-Key\"", "\"cookie:X-Api-Key\""), // a key source
        ("\"10.0.0.0/8\"", "\"10.0.0.0\""),               // a network
    ];
    for (from, to) in wrong {
        let bad = VALID.replacen(from, to, 1);
        assert_ne!(bad, VALID, "`{from}` is not in the config");
        assert!(
            toml::from_str::<Config>(&bad).is_err(),
            "the types accept `{to}`: a case of this test is wrong"
        );
        assert_ne!(
            errors(&validator, &as_json(&bad)),
            "",
            "the schema accepts `{to}`, which the types refuse"
        );
    }
}

#[test]
fn enforce_percent_is_a_percentage_for_the_schema_as_for_the_loader() {
    let validator = validator();
    let with = |p: u32| {
        VALID.replacen(
            "burst = 20,",
            &format!("burst = 20, enforce_percent = {p},"),
            1,
        )
    };
    for (p, loads) in [(0, true), (100, true), (101, false)] {
        let config = with(p);
        assert_ne!(config, VALID);
        assert_eq!(Policy::from_toml("t.toml", &config).is_ok(), loads, "{p}");
        assert_eq!(validator.is_valid(&as_json(&config)), loads, "{p}");
    }
}

/// Whether the schema accepts `value` at `table.key` of an otherwise
/// empty config.
fn accepts(validator: &jsonschema::Validator, table: &str, key: &str, value: &str) -> bool {
    validator.is_valid(&json!({ table: { key: value } }))
}

#[test]
fn the_key_source_pattern_is_the_parser() {
    let validator = validator();
    let samples = [
        "ip",
        "global",
        "bearer",
        "header:X-Api-Key",
        "header: X-Api-Key ",
        "header:x_y.z~!#$%&'*+^`-1",
        "bearer|header:X-Api-Key",
        " bearer | header:X-Api-Key ",
        "header:A|header:B|bearer",
        "header:",
        "header:bad name",
        "header:ä",
        "cookie:x",
        " ip",
        "IP",
        "Header:X",
        "bearer|",
        "bearer|ip",
        "|bearer",
        "",
    ];
    for s in samples {
        let parses = s.parse::<sluice_policy::KeySource>().is_ok();
        assert_eq!(
            accepts(&validator, "client", "key", s),
            parses,
            "key source `{s}`: the parser says {parses}"
        );
    }
}

#[test]
fn the_rate_and_duration_patterns_accept_what_parses() {
    let validator = validator();
    let rate = |s: &str| validator.is_valid(&json!({ "limits": [{ "rate": s }] }));
    let good_rates = [
        "10/s",
        "100/min",
        "5000/h",
        "1000/day",
        "50 per 10s",
        "50/10s",
        "1_000/s",
        " 10 / s ",
        "+5/s",
        "3/2 Hours",
        "7 per  1 WEEK",
    ];
    for s in good_rates {
        assert!(s.parse::<sluice_core::Rate>().is_ok(), "`{s}` is a rate");
        assert!(rate(s), "the schema refuses the rate `{s}`");
    }
    let bad_rates = [
        "10",
        "0/s",
        "10/0s",
        "10 per",
        "/s",
        "ten/s",
        "10/s/x",
        "10\tper 10s",
        "-1/s",
        "",
    ];
    for s in bad_rates {
        assert!(s.parse::<sluice_core::Rate>().is_err(), "`{s}` is a rate");
        assert!(!rate(s), "the schema accepts the rate `{s}`");
    }

    for s in ["10ms", "2s", "1 min", " 30 S ", "1h", "007d"] {
        assert!(
            sluice_core::parse_duration(s).is_ok(),
            "`{s}` is a duration"
        );
        assert!(accepts(&validator, "store", "timeout", s), "refused `{s}`");
        assert!(accepts(&validator, "server", "http2_keepalive_interval", s));
    }
    for s in ["ms", "0s", "0", "10", "1.5s", "-1s", "off", ""] {
        assert!(
            sluice_core::parse_duration(s).is_err(),
            "`{s}` is a duration"
        );
        assert!(
            !accepts(&validator, "store", "timeout", s),
            "accepted `{s}`"
        );
    }
    // `0`, `0s` and `off` switch the HTTP/2 keep-alive ping off.
    for s in ["0", "0s", "off", " off "] {
        assert!(accepts(&validator, "server", "http2_keepalive_interval", s));
    }
}

#[test]
fn the_enums_of_other_modules_are_theirs() {
    let validator = validator();
    let schema: Value = serde_json::to_value(json_schema()).expect("JSON");
    for (def, table, key) in [
        ("Algorithm", "envoy", "algorithm"),
        ("ForwardedHeader", "client", "forwarded_header"),
    ] {
        let names = schema["$defs"][def]["enum"].as_array().expect("an enum");
        assert!(!names.is_empty());
        for name in names {
            let name = name.as_str().expect("a name");
            let config = format!("[{table}]\n{key} = \"{name}\"\n");
            if let Err(e) = toml::from_str::<Config>(&config) {
                panic!("`{name}` of the schema's {def}: {e}");
            }
            assert!(accepts(&validator, table, key, name));
        }
        assert!(!accepts(&validator, table, key, "no-such-name"));
    }
}

/// A config that loads (parses and compiles) must validate: the schema
/// never refuses a config Sluice accepts. Over the fuzz corpus of configs
/// and the examples.
#[test]
fn every_config_that_loads_validates() {
    let validator = validator();
    let corpus = repo_root().join("fuzz/corpus/config_toml");
    let mut paths: Vec<PathBuf> = fs::read_dir(&corpus)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    paths.extend(whole_configs());
    let mut loaded = 0;
    for path in paths {
        let Ok(text) = fs::read_to_string(&path) else {
            continue;
        };
        let source = Source {
            file: path.clone(),
            text,
        };
        let Ok(config) = source.parse() else {
            continue;
        };
        if Deployment::compile(&source, &config).is_err()
            || Policy::compile(&source, &config).is_err()
        {
            continue;
        }
        loaded += 1;
        let found = errors(&validator, &as_json(&source.text));
        assert!(found.is_empty(), "{} loads, but:\n{found}", path.display());
    }
    assert!(loaded >= 3, "only {loaded} configs loaded");
}
