//! `sluice simulate` from the command line: the example log against the
//! quick start, as JSON and as an HTML page; JSON lines with bad lines; and
//! the exit codes for a bad config and a missing log.

use crate::common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::{TempConfig, example_path};

fn simulate(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("run sluice simulate")
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-sim-cli-{}-{name}", std::process::id()))
}

fn os(s: &str) -> &std::ffi::OsStr {
    s.as_ref()
}

#[test]
fn the_example_log_as_json_and_html() {
    let html = temp("report.html");
    let config = example_path("quickstart.toml");
    let log = example_path("simulate/access.log");
    let out = simulate(&[
        os("--config"),
        config.as_os_str(),
        os("--log"),
        log.as_os_str(),
        os("--json"),
        os("--out"),
        html.as_os_str(),
    ]);
    let page = std::fs::read_to_string(&html).unwrap_or_default();
    let _ = std::fs::remove_file(&html);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("{k}: {r:#}"));
    let lines = std::fs::read_to_string(&log).unwrap().lines().count() as u64;
    assert_eq!(n("lines"), lines);
    assert_eq!(n("bad_lines"), 0);
    assert_eq!(n("total"), lines);
    assert_eq!(n("allowed") + n("limited") + n("missing_key"), n("total"));
    assert!(n("limited") > 0, "{r:#}");
    assert!(n("missing_key") > 0, "{r:#}");
    // Per key, hashed: the keys themselves are not in the output.
    let by_key = r["by_key"].as_array().unwrap();
    assert!(by_key.len() >= 4, "{r:#}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("alice-key"), "{text}");
    let sum: u64 = by_key.iter().map(|k| k["requests"].as_u64().unwrap()).sum();
    assert_eq!(sum, n("total"));
    let first = &by_key[0];
    assert!(first["limited"].as_u64().unwrap() > 0, "{first}");
    assert!(
        r["by_plan"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "free")
    );
    assert!(
        r["by_endpoint"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "/export*")
    );
    assert!(!r["busiest_minutes"].as_array().unwrap().is_empty());
    // The page: self-contained, with its charts.
    assert!(page.contains("<svg"), "{page}");
    assert!(page.contains("Most limited clients"));
    assert!(!page.contains("<script"));
}

#[test]
fn text_summary_with_shown_keys() {
    let config = example_path("quickstart.toml");
    let log = example_path("simulate/access.log");
    let out = simulate(&[
        os("--config"),
        config.as_os_str(),
        os("--log"),
        log.as_os_str(),
        os("--show-keys"),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("clients that would be limited: 2 of 4"),
        "{text}"
    );
    assert!(text.contains("alice-key"), "{text}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("[x-api-key]"), "{err}");
}

#[test]
fn jsonl_with_bad_lines_reports_them_by_number() {
    let config = TempConfig::new(
        "sim-cli",
        "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 1\n",
    );
    let log = temp("log.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"time":"2026-11-30T10:00:00Z","method":"GET","path":"/","ip":"192.0.2.1"}"#,
            "\n{oops\n",
            r#"{"time":"2026-11-30T10:00:01Z","method":"GET","path":"/","ip":"192.0.2.1"}"#,
            "\n",
            r#"{"time":"2026-11-30T10:00:02Z","method":"GET","path":"/","ip":"nope"}"#,
            "\n"
        ),
    )
    .unwrap();
    let out = simulate(&[
        os("--config"),
        config.path().as_os_str(),
        os("--log"),
        log.as_os_str(),
        os("--format"),
        os("jsonl"),
        os("--json"),
    ]);
    let _ = std::fs::remove_file(&log);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            r["total"].as_u64(),
            r["allowed"].as_u64(),
            r["limited"].as_u64()
        ),
        (Some(2), Some(1), Some(1))
    );
    assert_eq!(r["bad_lines"], 2);
    assert_eq!(r["errors"][0]["line"], 2);
    assert_eq!(r["errors"][1]["line"], 4);
    assert!(
        r["errors"][1]["message"].as_str().unwrap().contains("nope"),
        "{r:#}"
    );
}

#[test]
fn a_bad_config_exits_2_and_a_missing_log_exits_1() {
    let bad = TempConfig::new("sim-bad", "[[limits]]\nrate = \"1/fortnight\"\n");
    let log = example_path("simulate/access.log");
    let out = simulate(&[
        os("--config"),
        bad.path().as_os_str(),
        os("--log"),
        log.as_os_str(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("fortnight"));

    let config = example_path("quickstart.toml");
    let out = simulate(&[
        os("--config"),
        config.as_os_str(),
        os("--log"),
        os("/nonexistent/access.log"),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/access.log"));
}

#[test]
fn nginx_fields_named_on_the_command_line_and_the_log_on_stdin() {
    use std::io::Write;
    // Clients behind a trusted proxy, named by IP: the second extra field
    // is X-Forwarded-For (the first, a key this config does not read).
    let config = TempConfig::new(
        "sim-xff",
        concat!(
            "[client]\ntrusted_proxies = [\"10.0.0.0/8\"]\n\n",
            "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 1\n"
        ),
    );
    let line = |xff: &str| {
        format!(
            "10.0.0.1 - - [30/Nov/2026:09:00:00 +0000] \"GET / HTTP/1.1\" 200 5 \"-\" \"ua\" \"k\" \"{xff}\"\n"
        )
    };
    let log = line("198.51.100.1") + &line("198.51.100.2") + &line("198.51.100.1");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("simulate")
        .arg("--config")
        .arg(config.path())
        .args([
            "--log",
            "-",
            "--nginx-fields",
            "X-Api-Key,X-Forwarded-For",
            "--json",
            "--show-keys",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn sluice simulate");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(log.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (r["allowed"].as_u64(), r["limited"].as_u64()),
        (Some(2), Some(1)),
        "{r:#}"
    );
    assert_eq!(r["by_key"][0]["key"], "198.51.100.1", "{r:#}");
    assert_eq!(r["by_key"][0]["limited"], 1, "{r:#}");
}

/// The settled-costs example of docs/simulate.md: the LLM gateway's free
/// tier over a JSON-lines log with token counts and durations.
#[test]
fn the_llm_example_settles_its_token_counts() {
    let config = example_path("llm-gateway.toml");
    let log = example_path("simulate/llm.jsonl");
    let decisions = temp("llm-decisions.jsonl");
    let out = simulate(&[
        os("--config"),
        config.as_os_str(),
        os("--log"),
        log.as_os_str(),
        os("--format"),
        os("jsonl"),
        os("--cost-field"),
        os("usage.total_tokens"),
        os("--decisions"),
        decisions.as_os_str(),
        os("--json"),
    ]);
    let written = std::fs::read_to_string(&decisions).unwrap_or_default();
    let _ = std::fs::remove_file(&decisions);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The long completion (line 2) ends at 13.5 s and puts the key 9,500
    // tokens in debt: refused at 14 s and 30 s, paid off by 45 s.
    let statuses: Vec<u64> = written
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["status"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 200, 200]);
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let settled = |name: &str| {
        let row = r["by_limit"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("{name}: {r:#}"));
        let s = &row["settled"];
        [
            "requests",
            "estimated",
            "actual",
            "refunded",
            "debited",
            "excess",
        ]
        .map(|k| s[k].as_u64().unwrap())
    };
    // 500 reserved per call; 120, 30000, 800 used, the 502 given back
    // whole, and the last (no usage) at its estimate.
    assert_eq!(
        settled("free-tokens"),
        [5, 2500, 120 + 30000 + 800 + 500, 380 + 500, 29500 + 300, 0]
    );
    assert_eq!(settled("free-tokens-daily"), settled("free-tokens"));
    // A log holds no request bodies: the streams limit, which counts only
    // bodies that say `"stream": true` (`match.json`), meets none.
    let rows = r["by_limit"].as_array().unwrap();
    assert!(!rows.iter().any(|l| l["name"] == "free-streams"), "{r:#}");
    assert_eq!(settled("free-requests")[0], 0, "it does not settle");
    let c = &r["costs"];
    assert_eq!(c["field"], "usage.total_tokens");
    assert_eq!(
        (c["read"].as_u64(), c["missing"].as_u64()),
        (Some(3), Some(2))
    );
    assert_eq!(c["errors"][0]["line"], 6);
}

#[test]
fn nginx_response_sizes_as_the_cost() {
    let config = TempConfig::new(
        "sim-bytes",
        "[[limits]]\nname = \"bytes\"\nkey = \"ip\"\nrate = \"1000/min\"\nburst = 1000\nsettle = { from = \"body_bytes\" }\n",
    );
    let line = |bytes: &str| {
        format!(
            "192.0.2.7 - - [30/Nov/2026:09:00:00 +0000] \"GET /export HTTP/1.1\" 200 {bytes} \"-\" \"curl\"\n"
        )
    };
    let log = temp("bytes.log");
    std::fs::write(
        &log,
        [line("900"), line("x"), line("200"), line("1")].concat(),
    )
    .unwrap();
    let run = |field: &str| {
        simulate(&[
            os("--config"),
            config.path().as_os_str(),
            os("--log"),
            log.as_os_str(),
            os("--cost-field"),
            os(field),
            os("--json"),
        ])
    };
    let out = run("body_bytes_sent");
    let bad = run("usage.total_tokens");
    let _ = std::fs::remove_file(&log);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 999 left, 899 more: 100; `x` is no size: 99 left at its estimate;
    // 98, 199 more: 98 and 101 of debt (one burst allowed); refused.
    assert_eq!(
        (r["allowed"].as_u64(), r["limited"].as_u64()),
        (Some(3), Some(1)),
        "{r:#}"
    );
    let s = &r["by_limit"][0]["settled"];
    assert_eq!(
        (s["debited"].as_u64(), s["excess"].as_u64()),
        (Some(899 + 199), Some(0)),
        "{r:#}"
    );
    assert_eq!(r["costs"]["not_whole"], 1);
    assert_eq!(r["costs"]["errors"][0]["line"], 2);
    // nginx lines have one cost, their size: anything else is refused
    // before the replay.
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("body_bytes_sent"));
}
