//! The report as plain text for a terminal.

use std::fmt::Write;

use super::{BadLine, Costs, KeyRow, LabelRow, LimitRow, MinuteRow, Report};

impl Report {
    /// A plain-text summary for a terminal: totals, the most limited
    /// clients (at most `top`), plans, endpoints, settled costs, busiest
    /// minutes and bad lines.
    pub fn to_text(&self, top: usize) -> String {
        let mut s = String::new();
        self.write_totals(&mut s);
        let hit: Vec<&KeyRow> = self
            .by_key
            .iter()
            .filter(|r| r.counts.limited > 0)
            .take(top)
            .collect();
        write_limited_clients(&mut s, &hit);
        write_label_table(&mut s, "plan", &self.by_plan);
        write_label_table(&mut s, "endpoint", &self.by_endpoint);
        write_settled(&mut s, &self.costs, &self.by_limit);
        write_busiest_minutes(&mut s, &self.busiest_minutes);
        write_bad_lines(&mut s, self.bad_lines, &self.errors);
        s
    }

    /// The span and line counts, the outcomes with their shares, and how
    /// many clients would be limited.
    fn write_totals(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "{} requests from {} to {} ({} lines, {} bad)",
            self.total,
            self.start.as_deref().unwrap_or("-"),
            self.end.as_deref().unwrap_or("-"),
            self.lines,
            self.bad_lines
        );
        let _ = writeln!(
            s,
            "  allowed {} ({:.1}%), limited {} ({:.1}%), delayed {}, missing key {}, denied {}, impossible {}, shadow-limited {}",
            self.allowed,
            self.percent(self.allowed),
            self.limited,
            self.percent(self.limited),
            self.delayed,
            self.missing_key,
            self.denied,
            self.impossible,
            self.shadow_limited
        );
        let _ = writeln!(
            s,
            "\nclients that would be limited: {} of {}",
            self.clients_limited, self.clients
        );
    }
}

/// The limited clients' table; nothing when there are none.
fn write_limited_clients(s: &mut String, rows: &[&KeyRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "  {:<40} {:>10} {:>10} {:>10}",
        "client", "requests", "admitted", "limited"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<40} {:>10} {:>10} {:>10}",
            r.key, r.counts.requests, r.counts.admitted, r.counts.limited
        );
    }
}

/// A table of plans or endpoints (`title` heads its first column);
/// nothing when there are none.
fn write_label_table(s: &mut String, title: &str, rows: &[LabelRow]) {
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<40} {:>10} {:>10} {:>10} {:>10}",
        title, "requests", "admitted", "limited", "delayed"
    );
    for r in rows {
        let _ = writeln!(
            s,
            "  {:<40} {:>10} {:>10} {:>10} {:>10}",
            r.name, r.counts.requests, r.counts.admitted, r.counts.limited, r.counts.delayed
        );
    }
}

/// The costs read from the log and what each limit's settlements moved;
/// nothing without a cost field or a limit that settled.
fn write_settled(s: &mut String, costs: &Costs, limits: &[LimitRow]) {
    let settled: Vec<&LimitRow> = limits.iter().filter(|l| l.settled.requests > 0).collect();
    if !costs.field.is_empty() {
        let _ = writeln!(
            s,
            "\ncosts from `{}`: {} read, {} missing, {} not a whole number",
            costs.field, costs.read, costs.missing, costs.not_whole
        );
        for e in &costs.errors {
            let _ = writeln!(s, "  line {}: {}", e.line, e.message);
        }
    }
    if settled.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<30} {:>9} {:>11} {:>11} {:>11} {:>11} {:>9}",
        "settled (limit)", "requests", "estimated", "actual", "refunded", "debited", "excess"
    );
    for l in settled {
        let c = &l.settled;
        let _ = writeln!(
            s,
            "  {:<30} {:>9} {:>11} {:>11} {:>11} {:>11} {:>9}",
            l.name, c.requests, c.estimated, c.actual, c.refunded, c.debited, c.excess
        );
    }
    if costs.settled_early > 0 {
        let _ = writeln!(
            s,
            "  {} requests settled early: too many in flight",
            costs.settled_early
        );
    }
}

/// The busiest minutes' table; nothing when there are none.
fn write_busiest_minutes(s: &mut String, minutes: &[MinuteRow]) {
    if minutes.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "\n  {:<40} {:>10} {:>10}",
        "busiest minutes (UTC)", "requests", "limited"
    );
    for m in minutes {
        let _ = writeln!(s, "  {:<40} {:>10} {:>10}", m.minute, m.requests, m.limited);
    }
}

/// The kept bad lines with their messages, under the count of all of
/// them; nothing when none were kept.
fn write_bad_lines(s: &mut String, bad_lines: u64, errors: &[BadLine]) {
    if errors.is_empty() {
        return;
    }
    let _ = writeln!(s, "\nbad lines ({bad_lines}):");
    for e in errors {
        let _ = writeln!(s, "  line {}: {}", e.line, e.message);
    }
}
