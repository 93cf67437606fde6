//! The report as one self-contained HTML page: inline CSS and inline SVG
//! charts, no scripts, nothing fetched.

use std::fmt::Write;

use crate::report::{Counts, LabelRow, Report, Timeline};
use crate::time::format_rfc3339;

/// How many clients the bar chart shows.
const CHART_KEYS: usize = 20;
/// How many clients the table lists.
const TABLE_KEYS: usize = 100;

/// Escapes text for HTML content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Renders the report. `title` names the replay (e.g. the log's file name).
pub fn render(report: &Report, title: &str) -> String {
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>sluice simulate: {title}</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1000px; color: #222; padding: 0 1em; }}
h1 {{ font-size: 1.5em; }} h2 {{ font-size: 1.15em; margin-top: 2em; }}
table {{ border-collapse: collapse; margin: .5em 0; }}
th, td {{ padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: right; }}
th:first-child, td:first-child {{ text-align: left; font-family: ui-monospace, monospace; }}
.num {{ font-size: 1.6em; font-weight: 600; }}
.cards {{ display: flex; gap: 1.5em; flex-wrap: wrap; }}
.card {{ border: 1px solid #ddd; border-radius: 6px; padding: .5em 1em; }}
.lim {{ color: #c62828; }} .ok {{ color: #2e7d32; }}
svg text {{ font: 11px system-ui, sans-serif; fill: #444; }}
</style></head><body>
<h1>sluice simulate: {title}</h1>
<p>{start} to {end} (UTC). {lines} lines, {bad} bad, {ooo} out of order.</p>
"#,
        title = esc(title),
        start = esc(report.start.as_deref().unwrap_or("-")),
        end = esc(report.end.as_deref().unwrap_or("-")),
        lines = report.lines,
        bad = report.bad_lines,
        ooo = report.out_of_order,
    );
    let pct = |n: u64| {
        if report.total == 0 {
            0.0
        } else {
            n as f64 * 100.0 / report.total as f64
        }
    };
    let _ = write!(
        h,
        r#"<div class="cards">
<div class="card">requests<div class="num">{}</div></div>
<div class="card ok">allowed<div class="num">{}</div>{:.1}%</div>
<div class="card lim">limited (429)<div class="num">{}</div>{:.1}%</div>
<div class="card">delayed<div class="num">{}</div></div>
<div class="card">missing key (401)<div class="num">{}</div></div>
<div class="card">denied (403)<div class="num">{}</div></div>
<div class="card">shadow would limit<div class="num">{}</div></div>
<div class="card lim">clients limited<div class="num">{} / {}</div></div>
</div>
"#,
        report.total,
        report.allowed,
        pct(report.allowed),
        report.limited,
        pct(report.limited),
        report.delayed,
        report.missing_key,
        report.denied,
        report.shadow_limited,
        report.clients_limited,
        report.clients,
    );

    h.push_str("<h2>Requests and limited requests over time</h2>\n");
    timeline_svg(&mut h, &report.timeline);

    h.push_str("<h2>Most limited clients</h2>\n");
    keys_svg(&mut h, report);

    label_table(&mut h, "Plans", "plan", &report.by_plan);
    label_table(&mut h, "Endpoints", "endpoint", &report.by_endpoint);

    if !report.by_limit.is_empty() {
        h.push_str("<h2>Limits</h2>\n<table><tr><th>limit</th><th>plan</th><th>endpoint</th><th>decided</th><th>limited</th><th>shadow decided</th><th>shadow would limit</th></tr>\n");
        for l in &report.by_limit {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&l.name),
                esc(&l.plan),
                esc(&l.endpoint),
                l.requests,
                l.limited,
                l.shadow_requests,
                l.shadow_limited
            );
        }
        h.push_str("</table>\n");
    }

    if !report.busiest_minutes.is_empty() {
        h.push_str("<h2>Busiest minutes</h2>\n<table><tr><th>minute (UTC)</th><th>requests</th><th>limited</th></tr>\n");
        for m in &report.busiest_minutes {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                esc(&m.minute),
                m.requests,
                m.limited
            );
        }
        h.push_str("</table>\n");
    }

    let _ = writeln!(
        h,
        "<h2>Clients (the {} most limited of {})</h2>",
        TABLE_KEYS.min(report.by_key.len()),
        report.by_key.len()
    );
    h.push_str("<table>");
    counts_header(&mut h, "client");
    for r in report.by_key.iter().take(TABLE_KEYS) {
        counts_row(&mut h, &r.key, &r.counts);
    }
    h.push_str("</table>\n");

    if !report.errors.is_empty() {
        let _ = writeln!(
            h,
            "<h2>Bad lines ({})</h2>\n<table><tr><th>line</th><th>problem</th></tr>",
            report.bad_lines
        );
        for e in &report.errors {
            let _ = writeln!(
                h,
                "<tr><td>{}</td><td style=\"text-align:left\">{}</td></tr>",
                e.line,
                esc(&e.message)
            );
        }
        h.push_str("</table>\n");
    }
    h.push_str("<p>Generated by <code>sluice simulate</code>.</p>\n</body></html>\n");
    h
}

fn counts_header(h: &mut String, first: &str) {
    let _ = writeln!(
        h,
        "<tr><th>{first}</th><th>requests</th><th>admitted</th><th>limited</th><th>delayed</th><th>missing key</th><th>denied</th></tr>"
    );
}

fn counts_row(h: &mut String, name: &str, c: &Counts) {
    let _ = writeln!(
        h,
        "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"lim\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(name),
        c.requests,
        c.admitted,
        c.limited,
        c.delayed,
        c.missing_key,
        c.denied
    );
}

fn label_table(h: &mut String, title: &str, what: &str, rows: &[LabelRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(h, "<h2>{title}</h2>\n<table>");
    counts_header(h, what);
    for r in rows {
        counts_row(h, &r.name, &r.counts);
    }
    h.push_str("</table>\n");
}

/// A round number at or above `v`, for an axis's top.
fn nice_max(v: u64) -> u64 {
    let v = v.max(1);
    let mut step = 1u64;
    while step.saturating_mul(10) <= v {
        step *= 10;
    }
    for m in [1, 2, 5, 10] {
        if step.saturating_mul(m) >= v {
            return step.saturating_mul(m);
        }
    }
    v
}

fn bucket_name(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} day", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// Requests (blue) and limited requests (red) per bucket, as areas.
fn timeline_svg(h: &mut String, t: &Timeline) {
    let n = t.requests.len();
    if n == 0 {
        h.push_str("<p>No requests.</p>\n");
        return;
    }
    let (w, ht, left, right, top, bottom) = (960.0, 300.0, 60.0, 10.0, 20.0, 40.0);
    let (pw, ph) = (w - left - right, ht - top - bottom);
    let max = nice_max(t.requests.iter().copied().max().unwrap_or(1));
    let x = |i: usize| left + pw * i as f64 / n as f64;
    let y = |v: u64| top + ph - ph * v as f64 / max as f64;
    let _ = writeln!(
        h,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ht}" viewBox="0 0 {w} {ht}" role="img" aria-label="requests and limited requests per {b}">"##,
        b = bucket_name(t.bucket_seconds)
    );
    // Grid and y labels.
    for k in 0..=4u64 {
        let v = max * k / 4;
        let yy = y(v);
        let _ = writeln!(
            h,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end">{v}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0
        );
    }
    for series in [
        (&t.requests, "#90caf9", "#1565c0"),
        (&t.limited, "#ef9a9a", "#c62828"),
    ] {
        let (values, fill, stroke) = series;
        // A step area: each bucket is a flat segment.
        let mut pts = String::new();
        let _ = write!(pts, "{left:.1},{:.1} ", y(0));
        for (i, v) in values.iter().enumerate() {
            let _ = write!(
                pts,
                "{:.1},{:.1} {:.1},{:.1} ",
                x(i),
                y(*v),
                x(i + 1),
                y(*v)
            );
        }
        let _ = write!(pts, "{:.1},{:.1}", x(n), y(0));
        let _ = writeln!(
            h,
            r##"<polygon points="{pts}" fill="{fill}" fill-opacity="0.7" stroke="{stroke}" stroke-width="1"/>"##
        );
    }
    // X labels: start, middle, end.
    for (i, anchor) in [(0, "start"), (n / 2, "middle"), (n, "end")] {
        let secs = t.start + t.bucket_seconds * i as u64;
        let _ = writeln!(
            h,
            r##"<text x="{:.1}" y="{}" text-anchor="{anchor}">{}</text>"##,
            x(i),
            ht - bottom + 16.0,
            format_rfc3339(secs)
        );
    }
    let (l, yb) = (left, ht - 16.0);
    let b = bucket_name(t.bucket_seconds);
    let _ = writeln!(
        h,
        r##"<rect x="{l}" y="{yb}" width="10" height="10" fill="#90caf9"/><text x="{}" y="{}">requests per {b}</text><rect x="{}" y="{yb}" width="10" height="10" fill="#ef9a9a"/><text x="{}" y="{}">limited (429)</text>"##,
        l + 14.0,
        yb + 9.0,
        l + 170.0,
        l + 184.0,
        yb + 9.0,
    );
    h.push_str("</svg>\n");
}

/// The most limited clients as horizontal bars: admitted (green) and
/// limited (red).
fn keys_svg(h: &mut String, report: &Report) {
    let rows: Vec<_> = report
        .by_key
        .iter()
        .filter(|r| r.counts.limited > 0)
        .take(CHART_KEYS)
        .collect();
    if rows.is_empty() {
        h.push_str("<p>No client would be limited.</p>\n");
        return;
    }
    let (w, row_h, left, right, top) = (960.0, 22.0, 260.0, 150.0, 10.0);
    let ht = top + row_h * rows.len() as f64 + 30.0;
    let max = rows
        .iter()
        .map(|r| r.counts.admitted + r.counts.limited)
        .max()
        .unwrap_or(1)
        .max(1);
    let scale = (w - left - right) / max as f64;
    let _ = writeln!(
        h,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{ht}" viewBox="0 0 {w} {ht}" role="img" aria-label="most limited clients">"##
    );
    for (i, r) in rows.iter().enumerate() {
        let yy = top + row_h * i as f64;
        let (a, l) = (r.counts.admitted, r.counts.limited);
        let label = if r.key.chars().count() > 38 {
            format!("{}…", r.key.chars().take(37).collect::<String>())
        } else {
            r.key.clone()
        };
        let _ = writeln!(
            h,
            r##"<text x="{}" y="{:.1}" text-anchor="end">{}</text><rect x="{left}" y="{yy:.1}" width="{:.1}" height="{}" fill="#a5d6a7"/><rect x="{:.1}" y="{yy:.1}" width="{:.1}" height="{}" fill="#e57373"/><text x="{:.1}" y="{:.1}">{l} limited / {} requests</text>"##,
            left - 6.0,
            yy + 14.0,
            esc(&label),
            a as f64 * scale,
            row_h - 6.0,
            left + a as f64 * scale,
            l as f64 * scale,
            row_h - 6.0,
            left + (a + l) as f64 * scale + 6.0,
            yy + 14.0,
            r.counts.requests
        );
    }
    let yb = ht - 16.0;
    let _ = writeln!(
        h,
        r##"<rect x="{left}" y="{yb}" width="10" height="10" fill="#a5d6a7"/><text x="{}" y="{}">admitted</text><rect x="{}" y="{yb}" width="10" height="10" fill="#e57373"/><text x="{}" y="{}">limited</text>"##,
        left + 14.0,
        yb + 9.0,
        left + 90.0,
        left + 104.0,
        yb + 9.0
    );
    h.push_str("</svg>\n");
}
