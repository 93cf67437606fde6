//! `sluice validate`: exit 0 on a good config; exit 2 with
//! `FILE:LINE:COL: message` on stderr for a broken one.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{TempConfig, example_path};

fn validate(config: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["validate", "--config"])
        .arg(config)
        .output()
        .expect("run sluice validate")
}

#[test]
fn the_examples_are_valid() {
    for name in ["quickstart.toml", "proxy.toml"] {
        let path = example_path(name);
        let out = validate(&path);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{name}: {stderr}");
        assert!(stdout.contains("ok"), "{name}: {stdout}");
        assert!(stderr.is_empty(), "{name}: {stderr}");
    }
}

/// Validates `text` and returns the one line it printed on stderr, after
/// checking the exit status is 2 and the line starts `FILE:LINE:COL: `.
fn error_line(label: &str, text: &str, line: usize, column: usize) -> String {
    let config = TempConfig::new(label, text);
    let out = validate(config.path());
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(out.stdout.is_empty(), "{:?}", out.stdout);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    let prefix = format!("{}:{line}:{column}: ", config.path().display());
    assert!(
        lines[0].starts_with(&prefix),
        "expected `{prefix}...`, got `{}`",
        lines[0]
    );
    let message = &lines[0][prefix.len()..];
    assert!(!message.trim().is_empty(), "no message: {stderr}");
    message.to_owned()
}

#[test]
fn a_bad_rate_is_located_at_its_value() {
    let text = "\
# A limit with a rate in an unknown unit.
[[limits]]
key = \"ip\"
rate = \"10/fortnight\"
burst = 5
";
    let message = error_line("bad-rate", text, 4, 8);
    assert!(message.contains("fortnight"), "{message}");
}

#[test]
fn a_misspelled_field_is_located_at_its_name() {
    let text = "\
listen = \"127.0.0.1:8080\"

[[limits]]
key = \"ip\"
rate = \"10/s\"
  burts = 5
";
    let message = error_line("unknown-field", text, 6, 3);
    assert!(message.contains("burts"), "{message}");
}

#[test]
fn a_plan_that_does_not_exist_is_located() {
    let text = "\
[client]
key = \"header:X-Api-Key\"
default_plan = \"gold\"

[plans.free]
limits = [{ rate = \"10/s\" }]
";
    let message = error_line("no-plan", text, 3, 16);
    assert!(message.contains("gold"), "{message}");
}

#[test]
fn a_missing_file_is_exit_2() {
    let path = std::env::temp_dir().join(format!(
        "sluice-it-{}-does-not-exist.toml",
        std::process::id()
    ));
    let out = validate(&path);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with(&format!("{}: ", path.display())),
        "{stderr}"
    );
}
