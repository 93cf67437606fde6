//! The replay through real policies: the quick start's plans, keys from
//! nginx's extra fields and from JSON headers, client IPs behind trusted
//! proxies, time on the virtual clock, bad lines, and the HTML page.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write;
use std::path::Path;

use sluice_sim::{Format, Options, Report, Simulator, Status};

fn quickstart() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/quickstart.toml"
    ))
}

/// An nginx line at second `s` past 13:55:00 with an API key field.
fn nginx(ip: &str, s: u32, req: &str, key: &str) -> String {
    format!(
        "{ip} - - [10/Oct/2000:13:{:02}:{:02} -0700] \"{req} HTTP/1.1\" 200 12 \"-\" \"curl/8.5\" \"{key}\"\n",
        55 + s / 60,
        s % 60
    )
}

fn run(sim: &mut Simulator, log: &str) -> (Report, Vec<(u64, Status)>) {
    let mut statuses = Vec::new();
    sim.replay_with(log.as_bytes(), |n, s| {
        statuses.push((n, s));
        Ok(())
    })
    .unwrap();
    (sim.report(), statuses)
}

fn row<'r>(report: &'r Report, key: &str) -> &'r sluice_sim::Counts {
    &report
        .by_key
        .iter()
        .find(|r| r.key == key)
        .unwrap_or_else(|| panic!("no row {key}: {}", report.to_json()))
        .counts
}

#[test]
fn quickstart_plans_from_an_nginx_log_with_the_key_field() {
    let mut log = String::new();
    for _ in 0..25 {
        log.push_str(&nginx("192.0.2.1", 0, "GET /", "alice"));
        log.push_str(&nginx("192.0.2.2", 0, "GET /", "demo-pro-key"));
    }
    // No key: 401 on the server.
    log.push_str(&nginx("192.0.2.3", 0, "GET /", "-"));
    // Exports: 2 per minute per key.
    for s in [1, 2, 3] {
        log.push_str(&nginx("192.0.2.2", s, "GET /export/x?y=1", "demo-pro-key"));
    }
    // Two seconds later alice has 20 more tokens.
    for _ in 0..21 {
        log.push_str(&nginx("192.0.2.1", 3, "GET /", "alice"));
    }
    let mut opts = Options::new(Format::Nginx);
    opts.show_keys = true;
    let mut sim = Simulator::load(quickstart(), opts).unwrap();
    assert_eq!(
        sim.nginx_fields()
            .iter()
            .map(|h| h.as_str())
            .collect::<Vec<_>>(),
        ["x-api-key"]
    );
    let (r, statuses) = run(&mut sim, &log);
    assert_eq!(r.bad_lines, 0, "{:?}", r.errors);
    assert_eq!(r.total, 25 * 2 + 1 + 3 + 21);
    let alice = row(&r, "alice");
    assert_eq!((alice.requests, alice.admitted, alice.limited), (46, 40, 6));
    let pro = row(&r, "demo-pro-key");
    assert_eq!((pro.requests, pro.admitted, pro.limited), (28, 27, 1));
    assert_eq!(row(&r, "(no key)").missing_key, 1);
    assert_eq!(r.missing_key, 1);
    assert_eq!((r.allowed, r.limited), (67, 7));
    assert_eq!((r.clients, r.clients_limited), (2, 2));
    // The most limited client comes first.
    assert_eq!(r.by_key[0].key, "alice");
    // Statuses per line, as the server would answer.
    assert_eq!(statuses[40], (41, Status::Limited)); // alice's 21st
    assert_eq!(statuses[50], (51, Status::MissingKey));
    assert_eq!(statuses[53], (54, Status::Limited)); // the third export
    let plan = |name: &str| r.by_plan.iter().find(|p| p.name == name).unwrap().counts;
    assert_eq!((plan("free").requests, plan("free").limited), (46, 6));
    assert_eq!((plan("pro").requests, plan("pro").limited), (28, 1));
    let export = r.by_endpoint.iter().find(|e| e.name == "/export*").unwrap();
    assert_eq!((export.counts.requests, export.counts.limited), (3, 1));
    let limit = r.by_limit.iter().find(|l| l.name == "export").unwrap();
    assert_eq!((limit.requests, limit.limited), (3, 1));
    assert_eq!(r.start.as_deref(), Some("2000-10-10T20:55:00Z"));
    assert_eq!(r.busiest_minutes[0].minute, "2000-10-10T20:55:00Z");
    assert_eq!(r.busiest_minutes[0].requests, r.total);
    assert_eq!(r.timeline.bucket_seconds, 1);
    assert_eq!(r.timeline.requests, [51, 1, 1, 22]);
    assert_eq!(r.timeline.limited, [5, 0, 0, 2]);
}

#[test]
fn a_combined_log_without_key_fields_is_all_missing_keys() {
    let mut sim = Simulator::load(quickstart(), Options::new(Format::Nginx)).unwrap();
    let line = "192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 5 \"-\" \"ua\"\n";
    let (r, _) = run(&mut sim, &line.repeat(3));
    assert_eq!((r.total, r.missing_key, r.allowed), (3, 3, 0));
}

#[test]
fn keys_are_hashed_unless_shown() {
    let log = nginx("192.0.2.1", 0, "GET /", "alice-secret-key");
    let mut sim = Simulator::load(quickstart(), Options::new(Format::Nginx)).unwrap();
    let (r, _) = run(&mut sim, &log);
    let json = r.to_json();
    assert!(!json.contains("alice-secret-key"), "{json}");
    assert!(r.by_key[0].key.starts_with("key:"), "{json}");
    assert!(!sluice_sim::html::render(&r, "t").contains("alice-secret-key"));
}

const PROXIED: &str = r#"
[client]
trusted_proxies = ["10.0.0.0/8"]

[[limits]]
name = "per-ip"
key = "ip"
rate = "1/min"
burst = 1
"#;

#[test]
fn jsonl_client_ips_behind_trusted_proxies() {
    let mut sim =
        Simulator::from_toml("proxied.toml", PROXIED, Options::new(Format::Jsonl)).unwrap();
    let line = |t: &str, peer: &str, xff: &str| {
        format!(
            r#"{{"time":"{t}","method":"GET","path":"/","ip":"{peer}","headers":{{"X-Forwarded-For":"{xff}"}}}}"#
        ) + "\n"
    };
    let mut log = String::new();
    // Two clients behind the proxy: one request each passes.
    log += &line("2026-11-30T10:00:00Z", "10.0.0.1", "198.51.100.1");
    log += &line("2026-11-30T10:00:00.1Z", "10.0.0.1", "198.51.100.2");
    log += &line("2026-11-30T10:00:00.2Z", "10.0.0.2", "198.51.100.1");
    // An untrusted peer gains nothing by forging the header.
    log += &line("2026-11-30T10:00:01Z", "203.0.113.5", "1.1.1.1");
    log += &line("2026-11-30T10:00:02Z", "203.0.113.5", "2.2.2.2");
    // A minute later the first client has a new token.
    log += &line("2026-11-30T10:01:00.5Z", "10.0.0.1", "198.51.100.1");
    let mut opts = Options::new(Format::Jsonl);
    opts.show_keys = true;
    let mut sim2 = Simulator::from_toml("proxied.toml", PROXIED, opts).unwrap();
    let (r, statuses) = run(&mut sim2, &log);
    let s: Vec<u16> = statuses.iter().map(|(_, s)| s.http_status()).collect();
    assert_eq!(s, [200, 200, 429, 200, 429, 200]);
    assert_eq!(row(&r, "198.51.100.1").requests, 3);
    assert_eq!(row(&r, "203.0.113.5").limited, 1);
    let (r1, _) = run(&mut sim, &log);
    assert!(r1.by_key.iter().all(|k| k.key.starts_with("ip:")));
}

#[test]
fn out_of_order_lines_are_replayed_at_the_latest_time() {
    let mut sim =
        Simulator::from_toml("proxied.toml", PROXIED, Options::new(Format::Jsonl)).unwrap();
    let log = [
        r#"{"time":1000000000,"method":"GET","path":"/","ip":"192.0.2.1"}"#,
        r#"{"time":1000000120,"method":"GET","path":"/","ip":"192.0.2.2"}"#,
        // Two minutes "earlier": decided at 1000000120, when the first
        // client's token has refilled; its next request is then limited.
        r#"{"time":1000000001,"method":"GET","path":"/","ip":"192.0.2.1"}"#,
        r#"{"time":1000000002,"method":"GET","path":"/","ip":"192.0.2.1"}"#,
    ]
    .join("\n");
    let (r, statuses) = run(&mut sim, &log);
    assert_eq!(r.out_of_order, 2);
    let s: Vec<u16> = statuses.iter().map(|(_, s)| s.http_status()).collect();
    assert_eq!(s, [200, 200, 200, 429]);
    assert_eq!(r.end.as_deref(), Some("2001-09-09T01:48:40Z"));
}

#[test]
fn bad_lines_are_counted_with_their_numbers_and_never_panic() {
    let mut sim = Simulator::load(quickstart(), Options::new(Format::Nginx)).unwrap();
    let mut log: Vec<u8> = Vec::new();
    log.extend_from_slice(nginx("192.0.2.1", 0, "GET /", "k").as_bytes());
    log.extend_from_slice(b"\n"); // blank: skipped, not bad
    log.extend_from_slice(b"not a log line\n");
    log.extend_from_slice(b"\xff\xfe binary\n");
    log.extend_from_slice(nginx("192.0.2.1", 0, "\\x16\\x03\\x01", "k").as_bytes());
    // Pseudo-random garbage, and every prefix of a good line.
    let good = nginx("192.0.2.9", 0, "GET /a?b", "k");
    for cut in 0..good.len() - 1 {
        log.extend_from_slice(&good.as_bytes()[..cut]);
        log.push(b'\n');
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..2000 {
        for _ in 0..40 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            log.push(b" \"[]-:/0123456789abcGET\\"[(x % 24) as usize]);
        }
        log.push(b'\n');
    }
    log.extend_from_slice(nginx("192.0.2.1", 0, "GET /", "k").trim_end().as_bytes()); // no final newline
    let mut n = 0;
    sim.replay_with(&log[..], |_, _| {
        n += 1;
        Ok(())
    })
    .unwrap();
    let r = sim.report();
    // The first and last lines, and the two prefixes that end after the
    // user agent (the key field is optional: those are missing keys).
    assert_eq!(n, 4, "{}", r.to_text(10));
    assert_eq!((r.total, r.allowed, r.missing_key), (4, 2, 2));
    assert!(r.bad_lines > 100);
    let first: Vec<(u64, &str)> = r
        .errors
        .iter()
        .take(3)
        .map(|e| (e.line, e.message.as_str()))
        .collect();
    assert_eq!(first[0].0, 3, "{first:?}");
    assert_eq!(first[1], (4, "not UTF-8"));
    assert_eq!(first[2].0, 5, "{first:?}");
    assert!(first[2].1.contains("bad request line"), "{first:?}");
    assert_eq!(r.errors.len(), 10);
    let mut text = String::new();
    let _ = write!(text, "{}", r.to_text(5));
    assert!(text.contains("line 3:"), "{text}");
}

#[test]
fn the_html_report_is_self_contained_with_svg_charts() {
    let mut log = String::new();
    for s in 0..600 {
        for k in ["a", "b", "c"] {
            log.push_str(&nginx("192.0.2.1", s / 3, "GET /export", k));
        }
    }
    log.push_str("<script>alert(1)</script> - -\n");
    let mut sim = Simulator::load(quickstart(), Options::new(Format::Nginx)).unwrap();
    let (r, _) = run(&mut sim, &log);
    assert!(r.limited > 0);
    let html = sluice_sim::html::render(&r, "access.log <x>");
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert_eq!(html.matches("<svg").count(), 2, "{html}");
    assert!(html.contains("<polygon"));
    assert!(html.contains("access.log &lt;x&gt;"));
    assert!(!html.contains("<script"), "escaped: {html}");
    assert!(!html.contains("src="));
    assert!(html.ends_with("</html>\n"));
}
