//! What a careless operator can point Sluice at, against the real binary:
//! a config linked to a FIFO or a device, an emptied or gutted keys file, a
//! control listener open to every address with a short admin token; and a
//! stop signal that must stop Sluice whatever it is doing.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Sluice, TempConfig, Upstream, UpstreamReply, client, example, proxy_config, send};

/// A guard against hangs, not a timing claim.
const GUARD: Duration = Duration::from_secs(20);

/// A unique path in the temp dir.
fn temp_path(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("sluice-it-files-{}-{n}-{name}", std::process::id()))
}

fn mkfifo(path: &Path) {
    let made = Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("run mkfifo");
    assert!(made.success());
}

/// Runs `sluice <args>` until it exits or prints its listening line (then
/// kills it); its exit code (`None`: still running) and what it wrote.
fn run_briefly(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut child = Command::new(common::sluice_binary())
        .args(args)
        .envs(env.iter().copied())
        .env("SLUICE_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + GUARD;
    let mut log = String::new();
    loop {
        match rx.recv_timeout(Duration::from_millis(50)) {
            Ok(line) => {
                log.push_str(&line);
                log.push('\n');
                if line.starts_with("sluice: listening") {
                    let _ = child.kill();
                    let _ = child.wait();
                    return (None, log);
                }
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait().expect("wait");
                return (status.code(), log);
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("sluice {args:?} neither exited nor listened; it said:\n{log}");
        }
    }
}

/// A config named through a link to a FIFO (no writer) or to `/dev/zero` is
/// refused at once. Before, opening the FIFO waited forever, and reading
/// `/dev/zero` grew memory without end.
#[test]
fn a_config_linked_to_a_fifo_or_a_device_is_refused_at_once() {
    let fifo = temp_path("fifo.toml");
    mkfifo(&fifo);
    let link = temp_path("link.toml");
    for target in [fifo.as_path(), Path::new("/dev/zero")] {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).unwrap();
        let config = link.to_str().unwrap();
        for command in ["validate", "serve"] {
            let (code, log) = run_briefly(&[command, "--config", config], &[]);
            assert_eq!(code, Some(2), "{command} on a link to {target:?}:\n{log}");
            assert!(log.contains("not a regular file"), "{log}");
        }
    }
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_file(&fifo);
}

/// A reload through a link retargeted to a FIFO fails and keeps the running
/// config; a stop signal then still stops Sluice. Before, the reload waited
/// on the FIFO forever.
#[tokio::test]
async fn a_reload_through_a_link_to_a_fifo_fails_and_the_config_stays() {
    let real = TempConfig::new("link-target", &example("quickstart.toml"));
    let link = temp_path("reload-link.toml");
    std::os::unix::fs::symlink(real.path(), &link).unwrap();
    let mut s = Sluice::start(&link);
    let fifo = temp_path("reload.fifo");
    mkfifo(&fifo);
    let tmp_link = temp_path("reload-link.new");
    std::os::unix::fs::symlink(&fifo, &tmp_link).unwrap();
    std::fs::rename(&tmp_link, &link).unwrap();
    s.signal("HUP");
    s.log_says("config reload failed").await;
    assert!(s.log().contains("a FIFO"), "{}", s.log());
    let r = send(client().get(s.url("/")).header("X-Api-Key", "alice")).await;
    assert_eq!(r.status, 200);
    let no_key = send(client().get(s.url("/"))).await;
    assert_eq!(no_key.status, 401, "the quick start is no longer in force");
    s.terminate();
    assert!(s.wait_exit(GUARD).success(), "{}", s.log());
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_file(&fifo);
}

/// SIGTERM stops Sluice within its shutdown timeout (10 s), however long
/// the request in flight would take: here an upstream that answers in two
/// minutes, under the proxy's 60 s response timeout. Before, Sluice waited
/// for it.
#[tokio::test]
async fn sigterm_stops_sluice_with_a_request_in_flight() {
    let upstream = Upstream::start(UpstreamReply {
        status: 200,
        delay: Duration::from_secs(120),
    });
    let mut s = Sluice::start_with("sigterm-in-flight", &proxy_config(&upstream.url()));
    let url = s.url("/slow");
    let in_flight = tokio::spawn(async move {
        let _ = client().get(url).header("X-Api-Key", "alice").send().await;
    });
    let deadline = Instant::now() + GUARD;
    while upstream.arrived() == 0 {
        assert!(
            Instant::now() < deadline,
            "the request never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    s.terminate();
    // Three times the 10 s shutdown timeout.
    let _ = s.wait_exit(Duration::from_secs(30));
    assert!(s.log().contains("sluice stopped"), "{}", s.log());
    in_flight.abort();
}

/// The quick start without `[keys]`, its plans assigned by a keys file.
fn with_keys_file(keys: &Path, extra: &str) -> String {
    let text = example("quickstart.toml").replace("[keys]\ndemo-pro-key = \"pro\"\n", "");
    common::replace_once(
        &text,
        "default_plan = \"free\"",
        &format!(
            "default_plan = \"free\"\nkeys_file = \"{}\"\n{extra}",
            keys.display()
        ),
    )
}

/// Whether `key` is on the pro plan (burst 300): 25 requests in a row
/// all pass, where the free plan (burst 20) would refuse some.
async fn is_pro(s: &Sluice, key: &str) -> bool {
    for _ in 0..25 {
        if send(client().get(s.url("/")).header("X-Api-Key", key))
            .await
            .status
            != 200
        {
            return false;
        }
    }
    true
}

/// A keys file emptied, or gutted by more than half, is refused on reload
/// like an emptied config: the paying keys keep their plan. Before, every
/// key fell back to the default plan with one INFO line.
#[tokio::test]
async fn an_emptied_or_gutted_keys_file_is_refused_and_plans_stay() {
    let keys = temp_path("keys.csv");
    std::fs::write(&keys, "k1,pro\nk2,pro\nk3,pro\n").unwrap();
    let s = Sluice::start_with("keys-loss", &with_keys_file(&keys, ""));
    assert!(is_pro(&s, "k1").await);
    std::fs::write(&keys, "").unwrap();
    s.signal("HUP");
    s.log_says("has no entries").await;
    assert!(is_pro(&s, "k1").await, "k1 lost its plan:\n{}", s.log());
    std::fs::write(&keys, "k1,pro\n").unwrap();
    s.signal("HUP");
    s.log_says("lost 2 of the 3").await;
    assert!(is_pro(&s, "k2").await, "k2 lost its plan:\n{}", s.log());
    // A change that keeps most keys applies.
    std::fs::write(&keys, "k1,pro\nk2,pro\nk4,pro\n").unwrap();
    s.signal("HUP");
    s.log_says("config reloaded").await;
    assert!(is_pro(&s, "k4").await);
    let _ = std::fs::remove_file(&keys);
}

/// An empty keys file stops the start, unless the config allows it.
#[test]
fn an_empty_keys_file_is_refused_at_start_unless_allowed() {
    let keys = temp_path("empty-keys.csv");
    std::fs::write(&keys, "").unwrap();
    let refused = TempConfig::new("keys-empty", &with_keys_file(&keys, ""));
    let (code, log) = run_briefly(
        &[
            "serve",
            "--config",
            refused.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--control-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(code, Some(2), "{log}");
    assert!(
        log.contains("client.keys_file") && log.contains("has no entries"),
        "{log}"
    );
    let allowed = TempConfig::new(
        "keys-empty-ok",
        &with_keys_file(&keys, "allow_keys_file_loss = true\n"),
    );
    let (code, log) = run_briefly(
        &[
            "serve",
            "--config",
            allowed.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--control-listen",
            "127.0.0.1:0",
        ],
        &[],
    );
    assert_eq!(code, None, "{log}");
    let _ = std::fs::remove_file(&keys);
}

/// A control listener on every address, and a five-character admin token,
/// are named at WARN when Sluice starts.
#[test]
fn an_open_control_listener_and_a_short_admin_token_are_warned_about() {
    let config = TempConfig::new("open-control", &example("quickstart.toml"));
    let (code, log) = run_briefly(
        &[
            "serve",
            "--config",
            config.path().to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--control-listen",
            "0.0.0.0:0",
        ],
        &[("SLUICE_ADMIN_TOKEN", "abcde")],
    );
    assert_eq!(code, None, "{log}");
    let warns: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warns
            .iter()
            .any(|l| l.contains("control_listen binds to every address")),
        "{log}"
    );
    assert!(
        warns
            .iter()
            .any(|l| l.contains("SLUICE_ADMIN_TOKEN is shorter")),
        "{log}"
    );
}
