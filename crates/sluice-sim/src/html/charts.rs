//! The page's inline SVG charts: requests over time, and the most limited
//! clients.

use std::fmt::Write;

use super::esc;
use crate::report::{Report, Timeline};
use crate::time::format_rfc3339;

/// How many clients the bar chart shows.
const CHART_KEYS: usize = 20;

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

/// A bucket's length in words: `1 day`, `6 h`, `15 min`, `10 s`.
fn bucket_name(seconds: u64) -> String {
    match seconds {
        s if s % 86_400 == 0 => format!("{} day", s / 86_400),
        s if s % 3600 == 0 => format!("{} h", s / 3600),
        s if s % 60 == 0 => format!("{} min", s / 60),
        s => format!("{s} s"),
    }
}

/// Requests (blue) and limited requests (red) per bucket, as areas.
pub(super) fn timeline_svg(h: &mut String, t: &Timeline) {
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
pub(super) fn keys_svg(h: &mut String, report: &Report) {
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
