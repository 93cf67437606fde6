//! The report of a replay (serializable as JSON): totals, counts per
//! client, plan, endpoint, limit and minute, and the timeline.
//!
//! Inside: `aggregate` counts decisions as the replay makes them, `summary`
//! turns the counts into a [`Report`], and `text` renders it for a terminal
//! ([`Report::to_text`]).

mod aggregate;
mod summary;
mod text;

use serde::Serialize;

pub(crate) use aggregate::Aggregator;
pub use aggregate::Client;

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
    /// Its settlements, when it settles costs after the response (or is
    /// a concurrency limit).
    pub settled: Settled,
}

/// What one limit's settlements moved: the requests it admitted, each
/// settled when it ended (see `docs/simulate.md`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Settled {
    /// Requests settled.
    pub requests: u64,
    /// The estimates charged at admission, summed.
    pub estimated: u64,
    /// The actual costs, summed.
    pub actual: u64,
    /// Given back: actual costs below their estimates (for a concurrency
    /// limit, the slots given back).
    pub refunded: u64,
    /// Charged afterwards: actual costs above their estimates, debt
    /// included.
    pub debited: u64,
    /// Beyond the limit's `max_debt`: not charged.
    pub excess: u64,
}

/// The costs read from the log's cost field for the requests settled (an
/// admitted request under a limit that settles; the cost of any other is
/// not used), and the settlements of the requests in flight.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Costs {
    /// The cost field, as given; `""` without one.
    pub field: String,
    /// Requests with a cost in the field.
    pub read: u64,
    /// Requests without it (or `null`): settled with no cost observed.
    pub missing: u64,
    /// Requests whose cost is not a whole number that is not negative:
    /// settled with no cost observed.
    pub not_whole: u64,
    /// Requests settled before they ended, because
    /// [`MAX_IN_FLIGHT`](crate::replay::MAX_IN_FLIGHT) were in flight.
    pub settled_early: u64,
    /// The first few requests settled without a cost, and why.
    pub errors: Vec<BadLine>,
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
    /// The log's costs and the settlements they made.
    pub costs: Costs,
}

impl Report {
    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain structs of strings and numbers cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// `n` as a percentage of the requests replayed (0 when there were
    /// none).
    pub(crate) fn percent(&self, n: u64) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            n as f64 * 100.0 / self.total as f64
        }
    }
}
