//! Parsing a metrics exposition with the Prometheus client's own parsers.

use std::io::Write;
use std::process::{Command, Stdio};

use serde_json::Value;

/// Parses an exposition with the Python client's parsers; `None` when they
/// are not installed (and `SLUICE_REQUIRE_PYTHON_PROM` is not set).
pub fn parse(text: &str) -> Option<Vec<Value>> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/parse_metrics.py"
    );
    let python = "/usr/bin/python3";
    let available = Command::new(python)
        .args(["-c", "import prometheus_client"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !available {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_PYTHON_PROM").is_none(),
            "python3-prometheus-client is required"
        );
        eprintln!("skipping the parser check: python3-prometheus-client is not installed");
        return None;
    }
    let mut child = Command::new(python)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the Prometheus parser rejected the exposition: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Value::Array(samples) = serde_json::from_slice(&out.stdout).unwrap() else {
        panic!("not a list");
    };
    Some(samples)
}

/// The value of the sample named `name` whose labels include `labels`.
pub fn value(samples: &[Value], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s["name"] == name
                && labels
                    .iter()
                    .all(|(k, v)| s["labels"][*k].as_str() == Some(*v))
        })
        .and_then(|s| s["value"].as_f64())
}

/// Adds every `sluice_…` metric name a PromQL expression uses to `names`.
pub fn names_in(expr: &str, names: &mut std::collections::BTreeSet<String>) {
    let mut rest = expr;
    while let Some(i) = rest.find("sluice_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
}
