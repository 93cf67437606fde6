//! `sluice simulate`: replays an access log through a config on a virtual
//! clock and reports who would have been limited (see `docs/simulate.md`).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sluice_sim::{Format, Options, Simulator};

/// The arguments of `sluice simulate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The config file (TOML).
    #[arg(long)]
    config: PathBuf,
    /// The access log (`-` for standard input).
    #[arg(long)]
    log: PathBuf,
    /// The log's format.
    #[arg(long, value_enum, default_value_t = LogFormat::Nginx)]
    format: LogFormat,
    /// Write a self-contained HTML report with charts to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Print a machine-readable JSON summary on standard output.
    #[arg(long)]
    json: bool,
    /// Show client keys and IPs instead of their hashes.
    #[arg(long)]
    show_keys: bool,
    /// The headers held by the extra quoted fields after the user agent in
    /// nginx lines, in order, comma-separated (default: the config's
    /// `header:` keys, then X-Forwarded-For if it trusts proxies).
    #[arg(long, value_delimiter = ',')]
    nginx_fields: Option<Vec<String>>,
    /// Where each line's actual cost is read, for the limits that settle
    /// after the response: a field of JSON lines, or a dotted path into
    /// nested objects (`tokens`, `usage.total_tokens`); for nginx lines,
    /// `body_bytes_sent` (the response size). A line without one settles
    /// at the estimate.
    #[arg(long, value_name = "FIELD")]
    cost_field: Option<String>,
    /// Write each request's status (200, 429, 401, 403, 400) as JSON lines
    /// `{"line":N,"status":S}` to this file.
    #[arg(long)]
    decisions: Option<PathBuf>,
    /// How many limited clients the text summary lists.
    #[arg(long, default_value_t = 20)]
    top: usize,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    /// nginx's `combined` format, with optional extra quoted header fields.
    Nginx,
    /// One JSON object per line.
    Jsonl,
}

/// Runs `sluice simulate`: exit 0 when the log was replayed (bad lines
/// included), 2 on a bad config or `--cost-field`, 1 when a file cannot be
/// read or written.
pub fn run(args: Args) -> ExitCode {
    let format = match args.format {
        LogFormat::Nginx => Format::Nginx,
        LogFormat::Jsonl => Format::Jsonl,
    };
    let mut options = Options::new(format);
    options.show_keys = args.show_keys;
    options.nginx_fields = args.nginx_fields.clone();
    options.cost_field = args.cost_field.clone();
    // Name keys (and split `enforce_percent` rollouts) as a Redis-backed
    // `sluice serve` with the same secret does.
    options.key_secret = match std::env::var("SLUICE_KEY_SECRET") {
        Ok(s) if !s.is_empty() => s.into_bytes(),
        _ => crate::DEFAULT_KEY_SECRET.to_vec(),
    };
    let mut sim = match Simulator::load(&args.config, options) {
        Ok(sim) => sim,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    match replay(&mut sim, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice simulate: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn replay(sim: &mut Simulator, args: &Args) -> anyhow::Result<()> {
    if matches!(args.format, LogFormat::Nginx) && !args.json {
        let fields: Vec<&str> = sim.nginx_fields().iter().map(|h| h.as_str()).collect();
        eprintln!(
            "sluice simulate: extra nginx fields after the user agent: [{}]",
            fields.join(", ")
        );
    }
    let reader: Box<dyn BufRead> = if args.log.as_os_str() == "-" {
        Box::new(BufReader::with_capacity(1 << 20, std::io::stdin().lock()))
    } else {
        let file =
            File::open(&args.log).with_context(|| format!("cannot open {}", args.log.display()))?;
        Box::new(BufReader::with_capacity(1 << 20, file))
    };
    let started = std::time::Instant::now();
    match &args.decisions {
        None => sim.replay(reader)?,
        Some(path) => {
            let file =
                File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = BufWriter::new(file);
            sim.replay_with(reader, |line, status| {
                writeln!(
                    out,
                    "{{\"line\":{line},\"status\":{}}}",
                    status.http_status()
                )
            })?;
            out.flush()
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
    }
    let elapsed = started.elapsed();
    let report = sim.report();
    if let Some(path) = &args.out {
        let title = args
            .log
            .file_name()
            .map_or_else(|| "-".into(), |n| n.to_string_lossy());
        std::fs::write(path, sluice_sim::html::render(&report, &title))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let mut stdout = std::io::stdout().lock();
    if args.json {
        writeln!(stdout, "{}", report.to_json())?;
    } else {
        write!(stdout, "{}", report.to_text(args.top))?;
        let secs = elapsed.as_secs_f64().max(1e-9);
        eprintln!(
            "sluice simulate: {} lines in {:.2} s ({:.0} lines/s)",
            report.lines,
            secs,
            report.lines as f64 / secs
        );
        if let Some(path) = &args.out {
            eprintln!("sluice simulate: wrote {}", path.display());
        }
    }
    Ok(())
}
