//! Reloads that could switch limiting off: an emptied file, a truncated
//! one, and one caught in the middle of a write all leave the running
//! config serving; a reload that removes limits says which, and counts
//! them.

use crate::common;

use std::time::{Duration, Instant};

use common::{Sluice, client, example, raw_get, send};

/// `/export` still has its limit of two, and a request without a key is
/// still refused: the quick start is still in force.
async fn quickstart_still_serves(s: &Sluice, key: &str) {
    for _ in 0..2 {
        assert_eq!(raw_get(s.data, "/export", key).await.status, 200);
    }
    let r = raw_get(s.data, "/export", key).await;
    assert_eq!(r.status, 429, "the export limit is gone:\n{}", r.text);
    let no_key = send(client().get(s.url("/"))).await;
    assert_eq!(no_key.status, 401, "requests without a key are admitted");
}

#[tokio::test]
async fn an_emptied_config_keeps_the_old_one_serving() {
    let s = Sluice::start_with("reload-empty", &example("quickstart.toml"));
    // `: > quickstart.toml`
    std::fs::File::create(s.config_path()).unwrap();
    s.log_says("no_limits").await;
    quickstart_still_serves(&s, "emptied").await;
    // Said explicitly, no limits is allowed.
    std::fs::write(s.config_path(), "no_limits = true\n").unwrap();
    s.signal("HUP");
    let deadline = Instant::now() + Duration::from_secs(20);
    while send(client().get(s.url("/"))).await.status != 200 {
        assert!(Instant::now() < deadline, "no_limits = true never applied");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_truncated_config_keeps_the_old_one_serving() {
    let text = example("quickstart.toml");
    let s = Sluice::start_with("reload-truncated", &text);
    let cut = text
        .find("key = \"header:X-Api-Key\"\nmatch")
        .expect("the export limit");
    std::fs::write(s.config_path(), &text[..cut + 8]).unwrap();
    s.signal("HUP");
    s.log_says("config reload failed").await;
    quickstart_still_serves(&s, "truncated").await;
}

/// The limits `POST /v1/check` reports for an export by one key.
async fn limits_in_force(s: &Sluice) -> Vec<String> {
    let r = send(client().post(s.control_url("/v1/check")).body(
        r#"{"path":"/export","headers":{"X-Api-Key":"watcher"},"client_ip":"192.0.2.9","cost":0}"#,
    ))
    .await;
    r.json()["limits"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_caught_mid_write_is_never_loaded() {
    let text = example("quickstart.toml");
    let s = Sluice::start_with("reload-midwrite", &text);
    let want = limits_in_force(&s).await;
    for name in ["free", "export", "ip-guard"] {
        assert!(want.iter().any(|n| n == name), "{want:?}");
    }
    // A writer that rewrites the same file line by line, 10 ms apart,
    // truncating it first each time (as `cat > file` or a slow copy does),
    // for three seconds: the poller reads it several times mid-write.
    let path = s.config_path().to_owned();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(3) {
            let mut f = std::fs::File::create(&path).unwrap();
            for line in text.split_inclusive('\n') {
                f.write_all(line.as_bytes()).unwrap();
                f.flush().unwrap();
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    });
    while !writer.is_finished() {
        let seen = limits_in_force(&s).await;
        assert_eq!(
            seen,
            want,
            "a half-written config was loaded; log:\n{}",
            s.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    writer.join().unwrap();
    quickstart_still_serves(&s, "midwrite").await;
}

#[tokio::test]
async fn a_reload_that_removes_limits_names_them_and_counts_them() {
    let text = example("quickstart.toml");
    let s = Sluice::start_with("reload-removes", &text);
    let export = text.find("# Exports are expensive").unwrap();
    let ip_guard = text.find("# A coarse guard").unwrap();
    let without = format!("{}{}", &text[..export], &text[ip_guard..])
        .replace("[plans.pro]\nlimits = [{ algorithm = \"token_bucket\", rate = \"100/s\", burst = 300 }]\n", "")
        .replace("demo-pro-key = \"pro\"\n", "");
    std::fs::write(s.config_path(), without).unwrap();
    s.signal("HUP");
    s.log_says("removes limits").await;
    let log = s.log();
    let line = log.lines().find(|l| l.contains("removes limits")).unwrap();
    assert!(line.contains("WARN"), "{line}");
    assert!(line.contains("export"), "{line}");
    assert!(line.contains("pro"), "{line}");
    let metrics = send(client().get(s.control_url("/metrics"))).await;
    let text = String::from_utf8_lossy(&metrics.body).into_owned();
    let samples = common::prom::parse(&text).expect("parse /metrics");
    assert_eq!(
        common::prom::value(
            &samples,
            "sluice_config_removed_total",
            &[("kind", "limit")]
        ),
        Some(2.0),
        "export and the pro plan's limit: {text}"
    );
    assert_eq!(
        common::prom::value(&samples, "sluice_config_removed_total", &[("kind", "plan")]),
        Some(1.0)
    );
}
