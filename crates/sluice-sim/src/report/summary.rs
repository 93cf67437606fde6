//! The report from the aggregator's counts: rows sorted most limited
//! first, clients named by hash unless shown, the busiest minutes and the
//! timeline bucketed.

use std::sync::Arc;

use sluice_core::clock::SECOND;
use sluice_store::KeyHasher;

use super::aggregate::{Aggregator, LimitCounts, Tick};
use super::{Counts, KeyRow, LabelRow, LimitRow, MinuteRow, Report, Timeline};
use crate::time::format_rfc3339;

/// The client row of requests without the client key (not a client).
const NO_KEY: &str = "(no key)";

/// How many minutes the report lists.
const BUSIEST_MINUTES: usize = 10;

/// The most buckets in the timeline.
const TIMELINE_BUCKETS: u64 = 600;

impl Aggregator {
    /// The report of what was counted.
    pub(crate) fn report(&self, show_keys: bool, hasher: &KeyHasher) -> Report {
        let t = &self.totals;
        let by_key = self.key_rows(show_keys, hasher);
        let (clients, clients_limited) = client_counts(&by_key);
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
            by_limit: limit_rows(&self.by_limit),
            busiest_minutes: busiest_minutes(&self.ticks, BUSIEST_MINUTES),
            timeline: timeline(&self.ticks),
            costs: self.costs.clone(),
        }
    }

    /// Every client's row, most limited first: keys and IPs (hashed unless
    /// `show_keys`), then the global client and requests without a key.
    fn key_rows(&self, show_keys: bool, hasher: &KeyHasher) -> Vec<KeyRow> {
        let mut rows: Vec<KeyRow> = Vec::with_capacity(self.by_key.len() + self.by_ip.len() + 2);
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
            rows.push(KeyRow { key, counts: *c });
        }
        for (ip, c) in &self.by_ip {
            let key = if show_keys {
                ip.to_string()
            } else {
                hashed("ip:", &ip.to_string())
            };
            rows.push(KeyRow { key, counts: *c });
        }
        for (key, counts) in [("(global)", self.global), (NO_KEY, self.no_key)] {
            if counts.requests > 0 {
                rows.push(KeyRow {
                    key: key.into(),
                    counts,
                });
            }
        }
        rows.sort_by(|a, b| {
            (b.counts.limited, b.counts.requests)
                .cmp(&(a.counts.limited, a.counts.requests))
                .then_with(|| a.key.cmp(&b.key))
        });
        rows
    }
}

/// Distinct clients, and those with a limited request (requests without a
/// key are no client).
fn client_counts(by_key: &[KeyRow]) -> (u64, u64) {
    let (mut clients, mut limited) = (0, 0);
    for r in by_key.iter().filter(|r| r.key != NO_KEY) {
        clients += 1;
        limited += u64::from(r.counts.limited > 0);
    }
    (clients, limited)
}

/// Plan or endpoint rows, most limited first.
fn label_rows(rows: &[(Arc<str>, Counts)]) -> Vec<LabelRow> {
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
}

/// Limit rows, most limited (enforced or in shadow) first.
fn limit_rows(limits: &[LimitCounts]) -> Vec<LimitRow> {
    let mut rows: Vec<LimitRow> = limits
        .iter()
        .map(|l| LimitRow {
            name: l.name.to_string(),
            plan: l.plan.to_string(),
            endpoint: l.endpoint.to_string(),
            requests: l.requests,
            limited: l.limited,
            shadow_requests: l.shadow_requests,
            shadow_limited: l.shadow_limited,
            settled: l.settled,
        })
        .collect();
    rows.sort_by(|a, b| {
        (b.limited + b.shadow_limited, b.requests)
            .cmp(&(a.limited + a.shadow_limited, a.requests))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// The `n` minutes with the most requests, busiest first.
fn busiest_minutes(ticks: &[Tick], n: usize) -> Vec<MinuteRow> {
    let mut minutes: Vec<(u64, u64, u64)> = Vec::new();
    for t in ticks {
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
/// the whole log fits in at most [`TIMELINE_BUCKETS`] of them.
fn timeline(ticks: &[Tick]) -> Timeline {
    let (Some(first), Some(last)) = (ticks.first(), ticks.last()) else {
        return Timeline::default();
    };
    let span = last.second - first.second + 1;
    let bucket = [1u64, 10, 60, 300, 900, 3600, 86_400]
        .into_iter()
        .find(|b| span.div_ceil(*b) <= TIMELINE_BUCKETS)
        .unwrap_or_else(|| span.div_ceil(TIMELINE_BUCKETS));
    let start = first.second / bucket * bucket;
    let len = usize::try_from((last.second - start) / bucket + 1).unwrap_or(0);
    let mut requests = vec![0; len];
    let mut limited = vec![0; len];
    for t in ticks {
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
