//! Reads the last `cargo bench -p sluice-bench --bench engine` and
//! `--bench in_process` runs and prints Sluice's ratios to governor beside
//! their floors: the standalone limiters (issue 3), then, for reference,
//! the engine's decision call and the memory store's path.
//!
//! `cargo run --release -p sluice-bench --bin ratios [CRITERION_DIR]`

use std::path::{Path, PathBuf};

/// Median time per element, in ns, of one benchmark.
fn median(dir: &Path, group: &str, bench: &str) -> Option<f64> {
    let path = dir.join(group).join(bench).join("new/estimates.json");
    let text = std::fs::read_to_string(&path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    json.get("median")?.get("point_estimate")?.as_f64()
}

struct Row {
    what: &'static str,
    sluice: (&'static str, &'static str),
    peer: (&'static str, &'static str),
    floor: f64,
}

const ROWS: &[Row] = &[
    Row {
        what: "single key: Sluice DirectLimiter (GCRA) / governor direct",
        sluice: ("single_key", "sluice_direct_gcra"),
        peer: ("single_key", "governor_direct"),
        floor: 1.0,
    },
    Row {
        what: "keyed 100k uniform: Sluice KeyedLimiter GCRA / governor keyed",
        sluice: ("keyed_uniform_100k", "sluice_keyed_gcra"),
        peer: ("keyed_uniform_100k", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k uniform: Sluice KeyedLimiter token bucket / governor keyed",
        sluice: ("keyed_uniform_100k", "sluice_keyed_token_bucket"),
        peer: ("keyed_uniform_100k", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k Zipf: Sluice KeyedLimiter GCRA / governor keyed",
        sluice: ("keyed_zipf_100k", "sluice_keyed_gcra"),
        peer: ("keyed_zipf_100k", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k Zipf: Sluice KeyedLimiter token bucket / governor keyed",
        sluice: ("keyed_zipf_100k", "sluice_keyed_token_bucket"),
        peer: ("keyed_zipf_100k", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k uniform, 16-byte keys: Sluice KeyedLimiter GCRA / governor keyed",
        sluice: ("keyed_uniform_100k_apikeys", "sluice_keyed_gcra"),
        peer: ("keyed_uniform_100k_apikeys", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k Zipf, 16-byte keys: Sluice KeyedLimiter GCRA / governor keyed",
        sluice: ("keyed_zipf_100k_apikeys", "sluice_keyed_gcra"),
        peer: ("keyed_zipf_100k_apikeys", "governor_keyed"),
        floor: 0.8,
    },
    Row {
        what: "keyed 100k, 2 threads: Sluice KeyedLimiter GCRA / governor keyed",
        sluice: ("keyed_uniform_100k_threads", "sluice_keyed_gcra_2"),
        peer: ("keyed_uniform_100k_threads", "governor_keyed_2"),
        floor: 0.8,
    },
];

/// Rows without a floor, for reference: the engine's whole decision (issue
/// 13's floors, which issue 30 replaced: a whole decision beside governor's
/// bare `check_key` is different work), one client of a per-IP limit
/// through the engine, and the store's own path (keyed by the key id the
/// caller computes with the in-memory store's random hasher). Issue 30's
/// in-process floor is judged by `thread_scaling` through the seam, as the
/// engine asks the store (`scripts/bench-peers`).
const INFO: &[Row] = &[
    Row {
        what: "engine path, one key (a global limit): Engine::decide_now / governor direct",
        sluice: ("engine_single_key", "sluice_engine"),
        peer: ("engine_single_key", "governor_direct"),
        floor: 0.0,
    },
    Row {
        what: "engine path, 100k uniform: Engine::decide_now / governor keyed",
        sluice: ("engine_uniform_100k", "sluice_engine"),
        peer: ("engine_uniform_100k", "governor_keyed"),
        floor: 0.0,
    },
    Row {
        what: "engine path, 100k Zipf: Engine::decide_now / governor keyed",
        sluice: ("engine_zipf_100k", "sluice_engine"),
        peer: ("engine_zipf_100k", "governor_keyed"),
        floor: 0.0,
    },
    Row {
        what: "engine path, one client of the per-IP limit (its key hashed each time) / governor direct",
        sluice: ("engine_single_key", "sluice_engine_one_client"),
        peer: ("engine_single_key", "governor_direct"),
        floor: 0.0,
    },
    Row {
        what: "single key: Sluice MemoryStore, one fixed key id / governor direct",
        sluice: ("single_key", "sluice_gcra"),
        peer: ("single_key", "governor_direct"),
        floor: 0.0,
    },
    Row {
        what: "keyed 100k uniform: Sluice MemoryStore (keyed id + check_one) / governor keyed",
        sluice: ("keyed_uniform_100k", "sluice_store_gcra"),
        peer: ("keyed_uniform_100k", "governor_keyed"),
        floor: 0.0,
    },
    Row {
        what: "keyed 100k uniform, 16-byte keys: Sluice MemoryStore / governor keyed",
        sluice: ("keyed_uniform_100k_apikeys", "sluice_store_gcra"),
        peer: ("keyed_uniform_100k_apikeys", "governor_keyed"),
        floor: 0.0,
    },
];

fn main() {
    let dir = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/criterion"));
    println!("| comparison | Sluice (ns/check) | peer (ns/check) | ratio | floor | met |");
    println!("|---|---:|---:|---:|---:|:---:|");
    let mut missing = false;
    for r in ROWS.iter().chain(INFO) {
        match (
            median(&dir, r.sluice.0, r.sluice.1),
            median(&dir, r.peer.0, r.peer.1),
        ) {
            (Some(s), Some(p)) => {
                let ratio = s / p;
                let (floor, met) = if r.floor > 0.0 {
                    // Judged at the precision the table prints: medians of
                    // two runs a few hundredths apart are a tie.
                    let met = if (ratio * 100.0).round() <= r.floor * 100.0 {
                        "yes"
                    } else {
                        "no"
                    };
                    (format!("≤ {:.1}", r.floor), met)
                } else {
                    ("—".to_owned(), "(no floor)")
                };
                println!(
                    "| {} | {s:.1} | {p:.1} | {ratio:.2} | {floor} | {met} |",
                    r.what
                );
            }
            _ => missing = true,
        }
    }
    // The control: what the clock read alone costs. When a single-key check
    // costs no more than this, the limiter adds nothing measurable to it.
    if let Some(clock) = median(&dir, "single_key", "clock_read_only") {
        println!(
            "| control: the clock read alone (quanta's TSC), made once per check by both | {clock:.1} | | | | |"
        );
    }
    let group = "keyed_uniform_100k_threads";
    for (name, one, two) in [
        (
            "Sluice KeyedLimiter GCRA",
            "sluice_keyed_gcra_1",
            "sluice_keyed_gcra_2",
        ),
        (
            "Sluice MemoryStore GCRA",
            "sluice_store_gcra_1",
            "sluice_store_gcra_2",
        ),
        ("governor keyed", "governor_keyed_1", "governor_keyed_2"),
    ] {
        if let (Some(t1), Some(t2)) = (median(&dir, group, one), median(&dir, group, two)) {
            let speedup = t1 / t2;
            let met = if name.starts_with("Sluice KeyedLimiter") {
                if speedup >= 1.7 { "yes" } else { "no" }
            } else if name.starts_with("governor") {
                "(peer)"
            } else {
                "(no floor)"
            };
            println!(
                "| 2 threads / 1 thread throughput, {name} | {t2:.1} | {t1:.1} | {speedup:.2}× | ≥ 1.7× | {met} |"
            );
        } else {
            missing = true;
        }
    }
    if missing {
        eprintln!(
            "some results are missing under {}: run `cargo bench -p sluice-bench --bench engine --bench in_process` first",
            dir.display()
        );
        std::process::exit(1);
    }
}
