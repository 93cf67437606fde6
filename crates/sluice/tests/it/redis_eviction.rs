//! Redis may evict Sluice's keys (issue 26, finding 7): a Redis shared
//! with a cache (`maxmemory` with `allkeys-lru`) dropped the state of a
//! burst of 20, which then admitted 102, and nobody was told. Sluice reads
//! each node's `maxmemory-policy` at start and refuses a policy that can
//! evict unless `[store] accept_eviction` accepts it; it reads the policy
//! and `evicted_keys` again while running, and exports both.
//!
//! No timing assertions: the deadlines below are hang guards, far above
//! the 200 ms between readings that the tests of a running Sluice set.

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sluice, TempConfig, client, example, replace_once, send, sluice_binary};
use sluice_testkit::{RedisServer, require_redis};

/// A hang guard for what the periodic check should notice.
const NOTICE_WITHIN: Duration = Duration::from_secs(30);

/// Read the policies again every 200 ms.
const OFTEN: &str = "eviction_check_interval = \"200ms\"\n";

/// The quickstart (on Redis, given `--store-url`), with `extra` lines in
/// `[store]`.
fn config(label: &str, extra: &str) -> TempConfig {
    let text = replace_once(
        &example("quickstart.toml"),
        "[store]\nurl = \"memory://\"\n",
        &format!("[store]\nurl = \"memory://\"\n{extra}"),
    );
    TempConfig::new(&format!("redis-eviction-{label}"), &text)
}

fn start(redis: &RedisServer, config: &TempConfig) -> Sluice {
    Sluice::start_env(
        config.path(),
        &["--store-url", &redis.url()],
        &[("SLUICE_KEY_SECRET", "eviction-test")],
    )
}

/// `/metrics` on the control listener.
async fn metrics(sluice: &Sluice) -> String {
    let r = send(client().get(sluice.control_url("/metrics"))).await;
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}

/// The value of the sample `name` whose labels include `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .find(|(series, _)| {
            let (n, rest) = series.split_once('{').unwrap_or((series, ""));
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|(_, value)| value.trim().parse().ok())
}

/// The node label Sluice gives this Redis.
fn node(redis: &RedisServer) -> String {
    redis.addr().to_string()
}

/// Polls `/metrics` until `done`, or panics after [`NOTICE_WITHIN`].
async fn metrics_until(sluice: &Sluice, what: &str, done: impl Fn(&str) -> bool) -> String {
    let started = Instant::now();
    loop {
        let text = metrics(sluice).await;
        if done(&text) {
            return text;
        }
        assert!(
            started.elapsed() < NOTICE_WITHIN,
            "{what}: not seen within {NOTICE_WITHIN:?}\n{text}\nlog:\n{}",
            sluice.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Writes `n` keys of `size` bytes in one pipeline and waits for Redis to
/// have answered them all.
fn fill(redis: &RedisServer, n: usize, size: usize) {
    let mut s = std::net::TcpStream::connect(redis.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let value = "x".repeat(size);
    let mut out = Vec::new();
    for i in 0..n {
        let key = format!("junk:{i}");
        write!(
            out,
            "*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n${size}\r\n{value}\r\n",
            key.len()
        )
        .unwrap();
    }
    out.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    s.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !got.ends_with(b"+PONG\r\n") {
        let k = s.read(&mut buf).unwrap();
        assert!(k > 0, "Redis closed the connection");
        got.extend_from_slice(&buf[..k]);
    }
}

#[test]
fn an_evicting_policy_refuses_the_start() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let cfg = config("refused", "");
    let mut child = Command::new(sluice_binary())
        .env("SLUICE_LOG", "info")
        .env("SLUICE_KEY_SECRET", "eviction-test")
        .args(["serve", "--config"])
        .arg(cfg.path())
        .args(["--listen", "127.0.0.1:0", "--control-listen", "127.0.0.1:0"])
        .args(["--store-url", &redis.url()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut log = String::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        while let Ok(line) = rx.try_recv() {
            log.push_str(&line);
            log.push('\n');
        }
        if log.contains("sluice: listening") {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice started on a Redis whose maxmemory-policy is allkeys-lru:\n{log}");
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice neither started nor exited:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(100));
    while let Ok(line) = rx.try_recv() {
        log.push_str(&line);
        log.push('\n');
    }
    assert!(!status.success(), "{status}:\n{log}");
    assert!(log.contains("maxmemory-policy"), "{log}");
    assert!(log.contains("allkeys-lru"), "{log}");
    assert!(log.contains(&node(&redis)), "{log}");
    assert!(log.contains("accept_eviction"), "{log}");
}

#[tokio::test]
async fn an_accepted_evicting_policy_is_warned_of_and_exported() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]);
    let cfg = config("accepted", "accept_eviction = true\n");
    let sluice = start(&redis, &cfg);
    let log = sluice.log();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("maxmemory-policy allkeys-lru")),
        "{log}"
    );
    let text = metrics(&sluice).await;
    let labels = [("node", node(&redis)), ("policy", "allkeys-lru".into())];
    let labels: Vec<(&str, &str)> = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
    assert_eq!(
        sample(&text, "sluice_redis_maxmemory_policy", &labels),
        Some(1.0),
        "{text}"
    );
}

#[tokio::test]
async fn a_noeviction_redis_starts_without_a_warning() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let cfg = config("noeviction", "");
    let sluice = start(&redis, &cfg);
    let text = metrics(&sluice).await;
    let n = node(&redis);
    let labels = [("node", n.as_str()), ("policy", "noeviction")];
    assert_eq!(
        sample(&text, "sluice_redis_maxmemory_policy", &labels),
        Some(1.0),
        "{text}"
    );
    let log = sluice.log();
    assert!(
        !log.lines()
            .any(|l| l.contains("maxmemory-policy") && (l.contains("WARN") || l.contains("ERROR"))),
        "{log}"
    );
}

#[tokio::test]
async fn evictions_are_counted() {
    if !require_redis() {
        return;
    }
    let redis =
        RedisServer::start_with(&["--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru"]);
    let cfg = config("evictions", &format!("accept_eviction = true\n{OFTEN}"));
    let sluice = start(&redis, &cfg);
    let n = node(&redis);
    let name = "sluice_redis_evicted_keys_total";
    let before = sample(&metrics(&sluice).await, name, &[("node", &n)]);
    assert_eq!(before, Some(0.0), "nothing was evicted yet");
    fill(&redis, 4000, 1000);
    let text = metrics_until(&sluice, "evictions", |t| {
        sample(t, name, &[("node", &n)]).is_some_and(|v| v > 0.0)
    })
    .await;
    let info = redis.command(&["INFO", "stats"]).unwrap();
    assert!(
        !info.contains("evicted_keys:0\r\n"),
        "Redis evicted: {info}"
    );
    assert!(sample(&text, name, &[("node", &n)]).unwrap() > 0.0);
}

#[tokio::test]
async fn a_policy_changed_while_running_is_noticed() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start_with(&["--maxmemory-policy", "noeviction"]);
    let cfg = config("changed", OFTEN);
    let sluice = start(&redis, &cfg);
    let n = node(&redis);
    let reply = redis
        .command(&["CONFIG", "SET", "maxmemory-policy", "volatile-lru"])
        .unwrap();
    assert!(reply.starts_with("+OK"), "{reply}");
    let changed = [("node", n.as_str()), ("policy", "volatile-lru")];
    metrics_until(&sluice, "the new policy", |t| {
        sample(t, "sluice_redis_maxmemory_policy", &changed) == Some(1.0)
    })
    .await;
    // Too late to refuse the start: it is logged as an error.
    let started = Instant::now();
    while !sluice
        .log()
        .lines()
        .any(|l| l.contains("ERROR") && l.contains("maxmemory-policy volatile-lru"))
    {
        assert!(started.elapsed() < NOTICE_WITHIN, "{}", sluice.log());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The alert rules file: its `sluice_*` metric names.
fn alert_metrics() -> BTreeSet<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/prometheus/sluice-alerts.yml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("valid YAML");
    let mut names = BTreeSet::new();
    let groups = rules["groups"].as_sequence().expect("groups");
    assert!(!groups.is_empty());
    for group in groups {
        assert!(group["name"].as_str().is_some_and(|n| !n.is_empty()));
        for rule in group["rules"].as_sequence().expect("rules") {
            assert!(rule["alert"].as_str().is_some_and(|a| !a.is_empty()));
            assert!(rule["labels"]["severity"].as_str().is_some(), "{rule:?}");
            assert!(
                rule["annotations"]["summary"].as_str().is_some(),
                "{rule:?}"
            );
            let expr = rule["expr"].as_str().expect("expr");
            common::prom::names_in(expr, &mut names);
        }
    }
    names
}

#[tokio::test]
async fn the_alert_rules_use_only_exported_metrics() {
    let used = alert_metrics();
    for needed in [
        "sluice_redis_evicted_keys_total",
        "sluice_redis_maxmemory_policy",
    ] {
        assert!(used.contains(needed), "the alert rules lack {needed}");
    }
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let cfg = config("alerts", "");
    let sluice = start(&redis, &cfg);
    let text = metrics(&sluice).await;
    let exported: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<_> = used
        .iter()
        .filter(|m| !exported.contains(m.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the alert rules use metrics Sluice does not export: {missing:?}\n{text}"
    );
}
