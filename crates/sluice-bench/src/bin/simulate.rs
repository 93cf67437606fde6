//! The simulator's throughput: replays synthetic access logs (2,000,000
//! lines by default) through `sluice_sim` on one thread and prints lines per
//! second for each case.
//!
//! ```sh
//! cargo run --release -p sluice-bench --bin simulate [-- LINES [CASE]]
//! ```
//!
//! Cases: nginx `combined` lines with an API-key field under a one-limit
//! plan policy (the "simple policy"), the same as JSON lines, and nginx
//! lines under the quick start (a plan limit and a per-IP limit). Keys are
//! drawn from 10,000 with a skew (a few heavy clients get limited), 600
//! lines a second.

use std::fmt::Write;
use std::time::Instant;

use sluice_bench::Rng;
use sluice_sim::{Format, Options, Simulator};

const SIMPLE: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ algorithm = "token_bucket", rate = "10/s", burst = 20 }]
"#;

const QUICKSTART: &str = include_str!("../../../../examples/quickstart.toml");

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The i-th key of a skewed draw over `n` keys.
fn key(rng: &mut Rng, n: u64) -> u64 {
    // The fourth power of a uniform draw: low keys are much more frequent
    // (key 0 draws 10% of the lines, 60 a second: it gets limited).
    let u = rng.next_f64();
    ((u * u * u * u) * n as f64) as u64
}

fn nginx_log(lines: u64) -> Vec<u8> {
    let mut rng = Rng::new(42);
    let mut out = String::with_capacity(lines as usize * 150);
    for i in 0..lines {
        let secs = i / 600; // 600 lines a second, from 00:00:00
        let (day, rem) = (1 + secs / 86_400, secs % 86_400);
        let k = key(&mut rng, 10_000);
        let _ = writeln!(
            out,
            "10.{}.{}.{} - - [{:02}/{}/2026:{:02}:{:02}:{:02} +0000] \"GET /v1/items/{} HTTP/1.1\" 200 {} \"-\" \"bench/1.0\" \"key-{k}\"",
            (k >> 16) & 255,
            (k >> 8) & 255,
            k & 255,
            day,
            MONTHS[10],
            rem / 3600,
            rem / 60 % 60,
            rem % 60,
            i % 1000,
            200 + i % 700,
        );
    }
    out.into_bytes()
}

fn jsonl_log(lines: u64) -> Vec<u8> {
    let mut rng = Rng::new(42);
    let mut out = String::with_capacity(lines as usize * 150);
    let base = 1_796_083_200_000u64; // 2026-12-01T00:00:00Z in ms
    for i in 0..lines {
        let k = key(&mut rng, 10_000);
        let _ = writeln!(
            out,
            r#"{{"time":{},"method":"GET","path":"/v1/items/{}","ip":"10.{}.{}.{}","headers":{{"X-Api-Key":"key-{k}"}}}}"#,
            base + i * 10 / 6,
            i % 1000,
            (k >> 16) & 255,
            (k >> 8) & 255,
            k & 255,
        );
    }
    out.into_bytes()
}

fn run(name: &str, config: &str, format: Format, log: &[u8], lines: u64) {
    // Three runs; the best is reported (the machine is shared).
    let mut best = f64::INFINITY;
    let mut summary = String::new();
    for _ in 0..3 {
        let mut sim = match Simulator::from_toml("bench.toml", config, Options::new(format)) {
            Ok(s) => s,
            Err(e) => panic!("{name}: {e}"),
        };
        let start = Instant::now();
        if let Err(e) = sim.replay(log) {
            panic!("{name}: {e}");
        }
        let report = sim.report();
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(report.lines, lines, "{name}");
        assert_eq!(report.bad_lines, 0, "{name}: {:?}", report.errors);
        best = best.min(secs);
        summary = format!(
            "{} allowed, {} limited, {} clients",
            report.allowed, report.limited, report.clients
        );
    }
    println!(
        "{name:<44} {lines} lines in {best:.3} s: {:>10.0} lines/s  ({summary})",
        lines as f64 / best
    );
}

fn main() {
    let lines: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    // Only the cases whose name contains this text.
    let only = std::env::args().nth(2).unwrap_or_default();
    let cases = [
        (
            "nginx combined + key, one plan limit",
            SIMPLE,
            Format::Nginx,
        ),
        ("JSON lines, one plan limit", SIMPLE, Format::Jsonl),
        (
            "nginx combined + key, quickstart.toml",
            QUICKSTART,
            Format::Nginx,
        ),
    ];
    let nginx = nginx_log(lines);
    let jsonl = jsonl_log(lines);
    println!(
        "nginx log: {:.0} MB, JSON lines: {:.0} MB",
        nginx.len() as f64 / 1e6,
        jsonl.len() as f64 / 1e6
    );
    for (name, config, format) in cases {
        if name.contains(&only) {
            let log = if format == Format::Nginx {
                &nginx
            } else {
                &jsonl
            };
            run(name, config, format, log, lines);
        }
    }
}
