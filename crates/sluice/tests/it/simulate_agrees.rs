//! `sluice simulate` agrees with `sluice serve`: a traffic sequence is sent
//! to the real server, each request's send time and status are recorded,
//! the requests are written as a JSON-lines log with those times, and the
//! simulator's decision for every line must be the status the server gave.
//!
//! No timing assertions: the limits refill one token every 2 seconds, and
//! the requests are sent in three waves at 0, 1 and 3 seconds, so every
//! decision is at least ~1 s from a refill boundary. Only a machine stalled
//! for most of a second between sending a request and deciding it could
//! make the two disagree.

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Sluice, client, send};

const CONFIG: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ algorithm = "token_bucket", rate = "1 per 2s", burst = 2 }]

[plans.pro]
limits = [{ algorithm = "gcra", rate = "1 per 2s", burst = 4 }]

[keys]
pro-key = "pro"

[access]
deny_keys = ["banned-key"]

[[limits]]
name = "export"
key = "header:X-Api-Key"
match = { path_prefix = "/export" }
rate = "1/min"
burst = 1

[[limits]]
name = "per-ip"
key = "ip"
algorithm = "sliding_window"
rate = "1000/min"
"#;

/// One request sent, and what the server said.
struct Sent {
    time: SystemTime,
    path: String,
    key: Option<&'static str>,
    status: u16,
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sluice-sim-agree-{}-{name}", std::process::id()))
}

#[tokio::test]
async fn simulate_decides_every_request_as_the_server_did() {
    let sluice = Sluice::start_with("simulate-agrees", CONFIG);
    let http = client();
    let mut sent: Vec<Sent> = Vec::new();
    let start = tokio::time::Instant::now();

    let send_one = |path: String, key: Option<&'static str>| {
        let mut req = http.get(sluice.url(&path));
        if let Some(k) = key {
            req = req.header("X-Api-Key", k);
        }
        let time = SystemTime::now();
        async move {
            let reply = send(req).await;
            Sent {
                time,
                path,
                key,
                status: reply.status,
            }
        }
    };

    let keys = ["k1", "k2", "k3", "pro-key"];
    let mut id = 0;
    let mut next = |prefix: &str| {
        id += 1;
        format!("{prefix}/{id}")
    };
    // Wave 1, at 0 s: k3 exports first (the second export is refused by
    // `export` alone), then four rounds over every key, then a request
    // without a key (401) and one from a denied key (403).
    sent.push(send_one(next("/export"), Some("k3")).await);
    sent.push(send_one(next("/export"), Some("k3")).await);
    for _ in 0..4 {
        for k in keys {
            sent.push(send_one(next("/r"), Some(k)).await);
        }
    }
    sent.push(send_one(next("/r"), None).await);
    sent.push(send_one(next("/r"), Some("banned-key")).await);
    // Wave 2, at 1 s: half a token each, all refused.
    tokio::time::sleep_until(start + Duration::from_secs(1)).await;
    for k in keys {
        sent.push(send_one(next("/r"), Some(k)).await);
    }
    // Wave 3, at 3 s: one and a half tokens each: one passes.
    tokio::time::sleep_until(start + Duration::from_secs(3)).await;
    for _ in 0..2 {
        for k in keys {
            sent.push(send_one(next("/r"), Some(k)).await);
        }
    }
    sent.push(send_one(next("/export"), Some("k1")).await);

    // The sequence exercises every outcome.
    let mut by_status: BTreeMap<u16, usize> = BTreeMap::new();
    for s in &sent {
        *by_status.entry(s.status).or_default() += 1;
    }
    for status in [200, 429, 401, 403] {
        assert!(by_status.contains_key(&status), "{by_status:?}");
    }

    // The log, with the times the requests were sent.
    let mut log = String::new();
    for s in &sent {
        let t = s.time.duration_since(UNIX_EPOCH).unwrap();
        let headers = match s.key {
            Some(k) => format!(r#"{{"X-Api-Key":"{k}"}}"#),
            None => "{}".into(),
        };
        log.push_str(&format!(
            r#"{{"time":{}.{:09},"method":"GET","path":"{}","ip":"127.0.0.1","headers":{headers}}}"#,
            t.as_secs(),
            t.subsec_nanos(),
            s.path
        ));
        log.push('\n');
    }
    let log_path = temp("log.jsonl");
    let decisions_path = temp("decisions.jsonl");
    std::fs::write(&log_path, &log).unwrap();

    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .arg("simulate")
        .arg("--config")
        .arg(sluice.config_path())
        .arg("--log")
        .arg(&log_path)
        .args(["--format", "jsonl", "--json", "--show-keys"])
        .arg("--decisions")
        .arg(&decisions_path)
        .output()
        .expect("run sluice simulate");
    let decisions = std::fs::read_to_string(&decisions_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    let _ = std::fs::remove_file(&decisions_path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    // Every request, line by line.
    let simulated: Vec<u16> = decisions
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            u16::try_from(v["status"].as_u64().unwrap()).unwrap()
        })
        .collect();
    let served: Vec<u16> = sent.iter().map(|s| s.status).collect();
    let paths: Vec<(&str, Option<&str>)> = sent.iter().map(|s| (s.path.as_str(), s.key)).collect();
    assert_eq!(simulated, served, "requests: {paths:?}\nreport: {report:#}");

    // The totals and the per-key counts.
    let count = |status: u16| served.iter().filter(|s| **s == status).count() as u64;
    assert_eq!(report["total"], sent.len() as u64);
    assert_eq!(report["allowed"], count(200));
    assert_eq!(report["limited"], count(429));
    assert_eq!(report["missing_key"], count(401));
    assert_eq!(report["denied"], count(403));
    assert_eq!(report["bad_lines"], 0);
    for k in keys {
        let row = report["by_key"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["key"] == k)
            .unwrap_or_else(|| panic!("no row for {k}: {report:#}"));
        let of_key = |status: u16| {
            sent.iter()
                .filter(|s| s.key == Some(k) && s.status == status)
                .count() as u64
        };
        assert_eq!(row["admitted"], of_key(200), "{k}: {row}");
        assert_eq!(row["limited"], of_key(429), "{k}: {row}");
    }
}
