//! The aggregator: counts each decision as the replay makes it, per client,
//! plan, endpoint, limit and second.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use sluice_core::Nanos;
use sluice_core::clock::SECOND;
use sluice_policy::Outcome as Status;
use sluice_policy::{Labels, SettledLimit, Verdict};
use smallvec::SmallVec;

use super::{BadLine, Costs, Counts, Settled};
use crate::log::CostError;

/// A cheap hasher for the aggregation maps (keys come from logs, not from
/// attackers of this process).
type Fast = foldhash::fast::FixedState;

/// How many bad lines are kept with their messages.
const KEPT_ERRORS: usize = 10;

impl Counts {
    /// Counts one request with its outcome.
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
            Status::Invalid | Status::Internal => self.impossible += 1,
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
pub(super) struct Tick {
    /// The second, in Unix seconds.
    pub(super) second: u64,
    /// Requests in it.
    pub(super) requests: u64,
    /// Of which limited.
    pub(super) limited: u64,
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
pub(super) struct LimitCounts {
    /// The limit's name.
    pub(super) name: Arc<str>,
    /// Its plan, or `""`.
    pub(super) plan: Arc<str>,
    /// Its endpoint label.
    pub(super) endpoint: Arc<str>,
    /// Requests it decided (enforced).
    pub(super) requests: u64,
    /// Requests it refused.
    pub(super) limited: u64,
    /// Requests it decided in shadow.
    pub(super) shadow_requests: u64,
    /// Requests it would have refused in shadow.
    pub(super) shadow_limited: u64,
    /// Its settlements.
    pub(super) settled: Settled,
}

/// Counts decisions as they are made.
#[derive(Debug, Default)]
pub(crate) struct Aggregator {
    /// Every request's outcome.
    pub(super) totals: Counts,
    /// Shadow-limit decisions that would have refused.
    pub(super) shadow_limited: u64,
    /// Per client key.
    pub(super) by_key: HashMap<Box<str>, Counts, Fast>,
    /// Per client IP.
    pub(super) by_ip: HashMap<IpAddr, Counts, Fast>,
    /// The one client of `key = "global"` configs.
    pub(super) global: Counts,
    /// Requests without the client key.
    pub(super) no_key: Counts,
    /// Where each limit's counts are, by the address of its labels (which
    /// live as long as the policy).
    slots: HashMap<usize, Slot, Fast>,
    /// Per plan, in order of first decision.
    pub(super) by_plan: Vec<(Arc<str>, Counts)>,
    /// Per endpoint label, in order of first decision.
    pub(super) by_endpoint: Vec<(Arc<str>, Counts)>,
    /// Per limit, in order of first decision.
    pub(super) by_limit: Vec<LimitCounts>,
    /// One entry per second with traffic, in time order.
    pub(super) ticks: Vec<Tick>,
    /// The first request's time.
    pub(super) first: Option<Nanos>,
    /// The last request's time.
    pub(super) last: Nanos,
    /// Lines that are not requests.
    pub(super) bad_lines: u64,
    /// The first [`KEPT_ERRORS`] of them.
    pub(super) errors: Vec<BadLine>,
    /// Lines earlier than one already replayed.
    pub(crate) out_of_order: u64,
    /// The costs read, and the first few missing.
    pub(crate) costs: Costs,
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

    /// Counts the cost field of the line of a request to settle (admitted
    /// under a limit that settles): `None` when no cost field is read.
    pub(crate) fn record_cost(&mut self, line: u64, cost: Option<&Result<u64, CostError>>) {
        let c = &mut self.costs;
        let error = match cost {
            None => return,
            Some(Ok(_)) => {
                c.read += 1;
                return;
            }
            Some(Err(e)) => e,
        };
        match error {
            CostError::Missing => c.missing += 1,
            CostError::NotWhole(_) => c.not_whole += 1,
        }
        if c.errors.len() < KEPT_ERRORS {
            c.errors.push(BadLine {
                line,
                message: error.to_string(),
            });
        }
    }

    /// Counts a request's settlements, per limit.
    pub(crate) fn record_settled(&mut self, settled: &[SettledLimit]) {
        for s in settled {
            let slot = self.slot(&s.labels);
            let c = &mut self.by_limit[slot.limit].settled;
            c.requests += 1;
            c.estimated = c.estimated.saturating_add(s.charged);
            c.actual = c.actual.saturating_add(s.actual);
            c.refunded = c.refunded.saturating_add(s.refunded);
            c.debited = c.debited.saturating_add(s.debited);
            c.excess = c.excess.saturating_add(s.excess);
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
        self.record_second(time / SECOND, status == Status::Limited);
        self.record_client(client, status);
        if let Some(v) = verdict {
            self.record_limits(v, status);
        }
    }

    /// Counts a request in its second's tick.
    fn record_second(&mut self, second: u64, limited: bool) {
        let limited = u64::from(limited);
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
    }

    /// Counts a request for its client.
    fn record_client(&mut self, client: Client<'_>, status: Status) {
        match client {
            Client::Key(k) => match self.by_key.get_mut(k) {
                Some(c) => c.add(status),
                None => self.by_key.entry(k.into()).or_default().add(status),
            },
            Client::Ip(ip) => self.by_ip.entry(ip).or_default().add(status),
            Client::Global => self.global.add(status),
            Client::None => self.no_key.add(status),
        }
    }

    /// Counts a request for each limit that decided it, and once for each
    /// plan and endpoint among them.
    fn record_limits(&mut self, v: &Verdict, status: Status) {
        // Each plan and endpoint counts a request once, with its outcome,
        // however many of its limits applied.
        let mut plans: SmallVec<[usize; 4]> = SmallVec::new();
        let mut endpoints: SmallVec<[usize; 4]> = SmallVec::new();
        for r in &v.results {
            let slot = self.slot(&r.labels);
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
            let slot = self.slot(&r.labels);
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
    fn slot(&mut self, l: &Labels) -> Slot {
        let addr = l.addr();
        if let Some(s) = self.slots.get(&addr) {
            return *s;
        }
        let slot = Slot {
            limit: self.by_limit.len(),
            plan: (!l.plan.is_empty()).then(|| index_of(&mut self.by_plan, &l.plan)),
            endpoint: index_of(&mut self.by_endpoint, &l.endpoint),
        };
        self.by_limit.push(LimitCounts {
            name: l.limit.clone(),
            plan: l.plan.clone(),
            endpoint: l.endpoint.clone(),
            ..LimitCounts::default()
        });
        self.slots.insert(addr, slot);
        slot
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
