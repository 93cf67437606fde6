//! Aggregation of decisions, and the report (serializable as JSON).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde::Serialize;
use sluice_core::Nanos;
use sluice_core::clock::SECOND;
use sluice_policy::{LimitResult, Verdict};
use sluice_store::KeyHasher;
use smallvec::SmallVec;

use crate::time::format_rfc3339;
use sluice_policy::Outcome as Status;

/// A cheap hasher for the aggregation maps (keys come from logs, not from
/// attackers of this process).
type Fast = foldhash::fast::FixedState;

/// How many bad lines are kept with their messages.
const KEPT_ERRORS: usize = 10;

/// The outcomes of a set of requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Requests replayed.
    pub requests: u64,
    /// Admitted (at once or after a delay).
    pub admitted: u64,
    /// Refused by a limit (429).
    pub limited: u64,
    /// Admitted after a delay (leaky bucket queueing); part of `admitted`.
    pub delayed: u64,
    /// Refused for lack of a key (401).
    pub missing_key: u64,
    /// Refused by the deny list (403).
    pub denied: u64,
    /// Refused as bad requests (400): costing more than a limit can ever
    /// admit, or with a path that has no canonical form.
    pub impossible: u64,
}

impl Counts {
    fn add(&mut self, status: Status) {
        self.requests += 1;
        match status {
            Status::Allowed => self.admitted += 1,
            Status::Delayed => {
                self.admitted += 1;
                self.delayed += 1;
            }
            Status::Limited | Status::StoreUnavailable => self.limited += 1,
            Status::MissingKey => self.missing_key += 1,
            Status::Denied => self.denied += 1,
            Status::Invalid => self.impossible += 1,
        }
    }
}

/// Who a request is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client<'a> {
    /// Its `[client]` key.
    Key(&'a str),
    /// Its IP address (configs that name clients by IP, or not at all).
    Ip(IpAddr),
    /// Every request is one client (`key = "global"`).
    Global,
    /// The request lacks the client key.
    None,
}

/// Requests and limited requests in one second.
#[derive(Debug, Clone, Copy)]
struct Tick {
    second: u64,
    requests: u64,
    limited: u64,
}

/// Where a limit's counts are.
#[derive(Debug, Clone, Copy)]
struct Slot {
    limit: usize,
    plan: Option<usize>,
    endpoint: usize,
}

/// A limit's counts.
#[derive(Debug, Clone, Default)]
struct LimitCounts {
    name: Arc<str>,
    plan: Arc<str>,
    endpoint: Arc<str>,
    requests: u64,
    limited: u64,
    shadow_requests: u64,
    shadow_limited: u64,
}

/// Counts decisions as they are made.
#[derive(Debug, Default)]
pub(crate) struct Aggregator {
    totals: Counts,
    shadow_limited: u64,
    by_key: HashMap<Box<str>, Counts, Fast>,
    by_ip: HashMap<IpAddr, Counts, Fast>,
    global: Counts,
    no_key: Counts,
    /// Where each limit's counts are, by the address of its labels (which
    /// live as long as the policy).
    slots: HashMap<usize, Slot, Fast>,
    by_plan: Vec<(Arc<str>, Counts)>,
    by_endpoint: Vec<(Arc<str>, Counts)>,
    by_limit: Vec<LimitCounts>,
    /// One entry per second with traffic, in time order.
    ticks: Vec<Tick>,
    first: Option<Nanos>,
    last: Nanos,
    bad_lines: u64,
    errors: Vec<BadLine>,
    /// Lines earlier than one already replayed.
    pub(crate) out_of_order: u64,
}

impl Aggregator {
    /// Counts a line that is not a request.
    pub(crate) fn bad_line(&mut self, line: u64, error: &impl std::fmt::Display) {
        self.bad_lines += 1;
        if self.errors.len() < KEPT_ERRORS {
            self.errors.push(BadLine {
                line,
                message: error.to_string(),
            });
        }
    }

    /// Counts one decided request. `time` never decreases between calls.
    pub(crate) fn record(
        &mut self,
        time: Nanos,
        client: Client<'_>,
        status: Status,
        verdict: Option<&Verdict>,
    ) {
        self.totals.add(status);
        self.first.get_or_insert(time);
        self.last = time;
        let limited = u64::from(status == Status::Limited);
        let second = time / SECOND;
        match self.ticks.last_mut() {
            Some(t) if t.second == second => {
                t.requests += 1;
                t.limited += limited;
            }
            _ => self.ticks.push(Tick {
                second,
                requests: 1,
                limited,
            }),
        }
        match client {
            Client::Key(k) => match self.by_key.get_mut(k) {
                Some(c) => c.add(status),
                None => self.by_key.entry(k.into()).or_default().add(status),
            },
            Client::Ip(ip) => self.by_ip.entry(ip).or_default().add(status),
            Client::Global => self.global.add(status),
            Client::None => self.no_key.add(status),
        }
        let Some(v) = verdict else { return };
        // Each plan and endpoint counts a request once, with its outcome,
        // however many of its limits applied.
        let mut plans: SmallVec<[usize; 4]> = SmallVec::new();
        let mut endpoints: SmallVec<[usize; 4]> = SmallVec::new();
        for r in &v.results {
            let slot = self.slot(r);
            if let Some(p) = slot.plan
                && !plans.contains(&p)
            {
                plans.push(p);
            }
            if !endpoints.contains(&slot.endpoint) {
                endpoints.push(slot.endpoint);
            }
            let c = &mut self.by_limit[slot.limit];
            c.requests += 1;
            c.limited += u64::from(!r.decision.allowed);
        }
        for r in &v.shadow {
            let refused = u64::from(!r.decision.allowed);
            self.shadow_limited += refused;
            let slot = self.slot(r);
            let c = &mut self.by_limit[slot.limit];
            c.shadow_requests += 1;
            c.shadow_limited += refused;
        }
        for p in plans {
            self.by_plan[p].1.add(status);
        }
        for e in endpoints {
            self.by_endpoint[e].1.add(status);
        }
    }

    /// Where a limit's counts are; made at its first decision.
    fn slot(&mut self, r: &LimitResult) -> Slot {
        let addr = Arc::as_ptr(&r.labels).addr();
        if let Some(s) = self.slots.get(&addr) {
            return *s;
        }
        let l = &r.labels;
        let slot = Slot {
            limit: self.by_limit.len(),
            plan: (!l.plan.is_empty()).then(|| index_of(&mut self.by_plan, &l.plan)),
            endpoint: index_of(&mut self.by_endpoint, &l.endpoint),
        };
        self.by_limit.push(LimitCounts {
            name: r.labels.limit.clone(),
            plan: l.plan.clone(),
            endpoint: l.endpoint.clone(),
            ..LimitCounts::default()
        });
        self.slots.insert(addr, slot);
        slot
    }

    /// The report of what was counted.
    pub(crate) fn report(&self, show_keys: bool, hasher: &KeyHasher) -> Report {
        let t = &self.totals;
        let mut by_key: Vec<KeyRow> = Vec::with_capacity(self.by_key.len() + self.by_ip.len() + 2);
        let hashed = |prefix: &str, text: &str| {
            let hex = hasher.key_id(text).to_hex();
            format!("{prefix}{}", &hex[..hex.len().min(16)])
        };
        for (k, c) in &self.by_key {
            let key = if show_keys {
                k.to_string()
            } else {
                hashed("key:", k)
            };
            by_key.push(KeyRow { key, counts: *c });
        }
        for (ip, c) in &self.by_ip {
            let key = if show_keys {
                ip.to_string()
            } else {
                hashed("ip:", &ip.to_string())
            };
            by_key.push(KeyRow { key, counts: *c });
        }
        if self.global.requests > 0 {
            by_key.push(KeyRow {
                key: "(global)".into(),
                counts: self.global,
            });
        }
        if self.no_key.requests > 0 {
            by_key.push(KeyRow {
                key: "(no key)".into(),
                counts: self.no_key,
            });
        }
        by_key.sort_by(|a, b| {
            (b.counts.limited, b.counts.requests)
                .cmp(&(a.counts.limited, a.counts.requests))
                .then_with(|| a.key.cmp(&b.key))
        });
        let label_rows = |rows: &[(Arc<str>, Counts)]| {
            let mut rows: Vec<LabelRow> = rows
                .iter()
                .map(|(name, c)| LabelRow {
                    name: name.to_string(),
                    counts: *c,
                })
                .collect();
            rows.sort_by(|a, b| {
                (b.counts.limited, b.counts.requests)
                    .cmp(&(a.counts.limited, a.counts.requests))
                    .then_with(|| a.name.cmp(&b.name))
            });
            rows
        };
        let mut by_limit: Vec<LimitRow> = self
            .by_limit
            .iter()
            .map(|l| LimitRow {
                name: l.name.to_string(),
                plan: l.plan.to_string(),
                endpoint: l.endpoint.to_string(),
                requests: l.requests,
                limited: l.limited,
                shadow_requests: l.shadow_requests,
                shadow_limited: l.shadow_limited,
            })
            .collect();
        by_limit.sort_by(|a, b| {
            (b.limited + b.shadow_limited, b.requests)
                .cmp(&(a.limited + a.shadow_limited, a.requests))
                .then_with(|| a.name.cmp(&b.name))
        });
        let clients_limited = by_key
            .iter()
            .filter(|r| r.counts.limited > 0 && r.key != "(no key)")
            .count() as u64;
        let clients = by_key.iter().filter(|r| r.key != "(no key)").count() as u64;
        Report {
            lines: 0,
            bad_lines: self.bad_lines,
            errors: self.errors.clone(),
            out_of_order: self.out_of_order,
            total: t.requests,
            allowed: t.admitted,
            limited: t.limited,
            delayed: t.delayed,
            missing_key: t.missing_key,
            denied: t.denied,
            impossible: t.impossible,
            shadow_limited: self.shadow_limited,
            start: self.first.map(|f| format_rfc3339(f / SECOND)),
            end: self.first.map(|_| format_rfc3339(self.last / SECOND)),
            clients,
            clients_limited,
            by_key,
            by_plan: label_rows(&self.by_plan),
            by_endpoint: label_rows(&self.by_endpoint),
            by_limit,
            busiest_minutes: self.busiest_minutes(10),
            timeline: self.timeline(),
        }
    }

    fn busiest_minutes(&self, n: usize) -> Vec<MinuteRow> {
        let mut minutes: Vec<(u64, u64, u64)> = Vec::new();
        for t in &self.ticks {
            let m = t.second / 60;
            match minutes.last_mut() {
                Some(last) if last.0 == m => {
                    last.1 += t.requests;
                    last.2 += t.limited;
                }
                _ => minutes.push((m, t.requests, t.limited)),
            }
        }
        minutes.sort_by(|a, b| b.1.cmp(&a.1).then(b.2.cmp(&a.2)).then(a.0.cmp(&b.0)));
        minutes.truncate(n);
        minutes
            .into_iter()
            .map(|(m, requests, limited)| MinuteRow {
                minute: format_rfc3339(m * 60),
                requests,
                limited,
            })
            .collect()
    }

    /// Requests and limited requests per bucket, the bucket chosen so that
    /// the whole log fits in at most 600 of them.
    fn timeline(&self) -> Timeline {
        let (Some(first), Some(last)) = (self.ticks.first(), self.ticks.last()) else {
            return Timeline::default();
        };
        let span = last.second - first.second + 1;
        let bucket = [1u64, 10, 60, 300, 900, 3600, 86_400]
            .into_iter()
            .find(|b| span.div_ceil(*b) <= 600)
            .unwrap_or_else(|| span.div_ceil(600));
        let start = first.second / bucket * bucket;
        let len = usize::try_from((last.second - start) / bucket + 1).unwrap_or(0);
        let mut requests = vec![0; len];
        let mut limited = vec![0; len];
        for t in &self.ticks {
            let i = usize::try_from((t.second - start) / bucket).unwrap_or(0);
            if let (Some(r), Some(l)) = (requests.get_mut(i), limited.get_mut(i)) {
                *r += t.requests;
                *l += t.limited;
            }
        }
        Timeline {
            bucket_seconds: bucket,
            start,
            requests,
            limited,
        }
    }
}

/// The index of a label's counts, added if new.
fn index_of(rows: &mut Vec<(Arc<str>, Counts)>, label: &Arc<str>) -> usize {
    match rows.iter().position(|(l, _)| l == label) {
        Some(i) => i,
        None => {
            rows.push((label.clone(), Counts::default()));
            rows.len() - 1
        }
    }
}

/// A line that is not a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BadLine {
    /// Its line number, from 1.
    pub line: u64,
    /// What is wrong with it.
    pub message: String,
}

/// One client's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyRow {
    /// The client: `key:<hash>` or `ip:<hash>` (the key or IP itself with
    /// `show_keys`), `(global)`, or `(no key)` for requests without one.
    pub key: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// One plan's or endpoint's counts: the requests to which at least one of
/// its limits applied, each with its outcome (`limited` whichever limit
/// refused it; [`LimitRow`] says which).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelRow {
    /// The plan or endpoint label.
    pub name: String,
    /// Its counts.
    #[serde(flatten)]
    pub counts: Counts,
}

/// One limit's decisions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LimitRow {
    /// The limit's name.
    pub name: String,
    /// Its plan, or `""`.
    pub plan: String,
    /// The requests it applies to (`*`, or methods and a path prefix).
    pub endpoint: String,
    /// Requests it decided (enforced).
    pub requests: u64,
    /// Requests it refused.
    pub limited: u64,
    /// Requests it decided in shadow (admitted requests only).
    pub shadow_requests: u64,
    /// Requests it would have refused in shadow.
    pub shadow_limited: u64,
}

/// One minute's traffic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MinuteRow {
    /// The minute's start, UTC.
    pub minute: String,
    /// Requests in it.
    pub requests: u64,
    /// Of which limited.
    pub limited: u64,
}

/// Requests and limited requests over time.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Timeline {
    /// The length of a bucket in seconds.
    pub bucket_seconds: u64,
    /// The first bucket's start, in Unix seconds.
    pub start: u64,
    /// Requests per bucket.
    pub requests: Vec<u64>,
    /// Limited requests per bucket.
    pub limited: Vec<u64>,
}

/// What a replay found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Lines read (blank and bad lines included).
    pub lines: u64,
    /// Lines that are not requests.
    pub bad_lines: u64,
    /// The first few bad lines and what is wrong with them.
    pub errors: Vec<BadLine>,
    /// Lines earlier than a line before them, replayed at the later time.
    pub out_of_order: u64,
    /// Requests replayed.
    pub total: u64,
    /// Admitted (at once or after a delay).
    pub allowed: u64,
    /// Refused by a limit (429).
    pub limited: u64,
    /// Admitted after a delay; part of `allowed`.
    pub delayed: u64,
    /// Refused for lack of a key (401).
    pub missing_key: u64,
    /// Refused by the deny list (403).
    pub denied: u64,
    /// Costing more than a limit can ever admit (400).
    pub impossible: u64,
    /// Shadow-limit decisions that would have refused (the request passed).
    pub shadow_limited: u64,
    /// The first request's time, UTC.
    pub start: Option<String>,
    /// The last request's time, UTC.
    pub end: Option<String>,
    /// Distinct clients.
    pub clients: u64,
    /// Clients with at least one limited request.
    pub clients_limited: u64,
    /// Every client, most limited first.
    pub by_key: Vec<KeyRow>,
    /// Per plan, most limited first.
    pub by_plan: Vec<LabelRow>,
    /// Per endpoint label, most limited first.
    pub by_endpoint: Vec<LabelRow>,
    /// Per limit, most limited first.
    pub by_limit: Vec<LimitRow>,
    /// The ten busiest minutes, busiest first.
    pub busiest_minutes: Vec<MinuteRow>,
    /// Requests and limited requests over time.
    pub timeline: Timeline,
}

impl Report {
    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// A plain-text summary for a terminal: totals, the most limited
    /// clients (at most `top`), plans, endpoints, busiest minutes and bad
    /// lines.
    pub fn to_text(&self, top: usize) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let pct = |n: u64| {
            if self.total == 0 {
                0.0
            } else {
                n as f64 * 100.0 / self.total as f64
            }
        };
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
            pct(self.allowed),
            self.limited,
            pct(self.limited),
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
        let hit: Vec<&KeyRow> = self
            .by_key
            .iter()
            .filter(|r| r.counts.limited > 0)
            .take(top)
            .collect();
        if !hit.is_empty() {
            let _ = writeln!(
                s,
                "  {:<40} {:>10} {:>10} {:>10}",
                "client", "requests", "admitted", "limited"
            );
            for r in hit {
                let _ = writeln!(
                    s,
                    "  {:<40} {:>10} {:>10} {:>10}",
                    r.key, r.counts.requests, r.counts.admitted, r.counts.limited
                );
            }
        }
        for (title, rows) in [("plan", &self.by_plan), ("endpoint", &self.by_endpoint)] {
            if rows.is_empty() {
                continue;
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
                    r.name,
                    r.counts.requests,
                    r.counts.admitted,
                    r.counts.limited,
                    r.counts.delayed
                );
            }
        }
        if !self.busiest_minutes.is_empty() {
            let _ = writeln!(
                s,
                "\n  {:<40} {:>10} {:>10}",
                "busiest minutes (UTC)", "requests", "limited"
            );
            for m in &self.busiest_minutes {
                let _ = writeln!(s, "  {:<40} {:>10} {:>10}", m.minute, m.requests, m.limited);
            }
        }
        if !self.errors.is_empty() {
            let _ = writeln!(s, "\nbad lines ({}):", self.bad_lines);
            for e in &self.errors {
                let _ = writeln!(s, "  line {}: {}", e.line, e.message);
            }
        }
        s
    }
}
