//! The live status page at `/` on the control listener, in a real headless
//! Chromium (Debian's `chromium`): it loads from the binary alone, its
//! charts show data after traffic, and its console stays silent. A
//! screenshot is left in `target/test-artifacts/status-page.png`.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Sluice, client, example_path, send};

fn chromium() -> Option<&'static str> {
    let found = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if found.is_none() {
        assert!(
            std::env::var_os("SLUICE_REQUIRE_CHROMIUM").is_none(),
            "chromium is required (SLUICE_REQUIRE_CHROMIUM is set)"
        );
        eprintln!("skipping: chromium is not installed");
    }
    found
}

fn headless(browser: &str) -> Command {
    let mut c = Command::new(browser);
    c.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        "--enable-logging=stderr",
        "--v=0",
    ]);
    c
}

/// The value of `name="…"` on the element that has it.
fn attr(dom: &str, name: &str) -> f64 {
    let needle = format!("{name}=\"");
    let start = dom
        .find(&needle)
        .unwrap_or_else(|| panic!("no {name} in the DOM"))
        + needle.len();
    let end = start + dom[start..].find('"').unwrap();
    dom[start..end]
        .parse()
        .unwrap_or_else(|_| panic!("{name}={}", &dom[start..end]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_renders_live_data_without_console_errors() {
    let Some(browser) = chromium() else { return };
    let sluice = Sluice::start(&example_path("quickstart.toml"));
    let client = client();
    // A noisy key gets limited, so the top-keys table has a row.
    for _ in 0..30 {
        send(client.get(sluice.url("/")).header("X-Api-Key", "noisy")).await;
    }
    // Steady traffic while the page is open, so the chart has rates: a
    // request every few milliseconds, so that one lands between two polls
    // even when the browser's virtual time runs them close together on a
    // loaded machine (at one every 20 ms, a CI run once saw none).
    let stop = Arc::new(AtomicBool::new(false));
    let traffic = {
        let (client, url, stop) = (client.clone(), sluice.url("/"), stop.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let key = if i.is_multiple_of(4) {
                    "noisy"
                } else {
                    "steady"
                };
                send(client.get(&url).header("X-Api-Key", key)).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    let url = sluice.control_url("/");
    let out = tokio::task::spawn_blocking({
        let (browser, url) = (browser.to_owned(), url.clone());
        move || {
            headless(&browser)
                .args(["--virtual-time-budget=10000", "--dump-dom", &url])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "chromium failed: {stderr}");

    assert!(
        attr(&dom, "data-polls") >= 2.0,
        "the page polled /v1/status"
    );
    assert_eq!(attr(&dom, "data-errors"), 0.0, "script errors: {dom}");
    assert!(attr(&dom, "data-points") >= 1.0, "the chart has points");
    assert!(attr(&dom, "data-max") > 0.0, "the chart shows traffic");
    assert!(
        attr(&dom, "data-rows") >= 1.0,
        "the top-keys table has rows"
    );
    assert!(!dom.contains("noisy"), "a raw key on the page");
    let console: Vec<&str> = stderr.lines().filter(|l| l.contains(":CONSOLE(")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let png = dir.join("status-page.png");
    let _ = std::fs::remove_file(&png);
    let shot = tokio::task::spawn_blocking({
        let (browser, png) = (browser.to_owned(), png.clone());
        move || {
            headless(&browser)
                .args([
                    "--virtual-time-budget=8000",
                    "--window-size=1280,560",
                    &format!("--screenshot={}", png.display()),
                    &url,
                ])
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");

    stop.store(true, Ordering::Relaxed);
    traffic.await.unwrap();
}
