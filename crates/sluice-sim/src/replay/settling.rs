//! Costs settled after the response, on the virtual clock: an admitted
//! request's [`Reservation`] is settled when the request ends (its line's
//! time plus its `duration`, or at once without one), with what its line
//! says of the response: the status, and the actual cost from the cost
//! field.
//!
//! The log's cost stands for what every settling limit reads: the reported
//! cost, a header or trailer, the body bytes and each `usage` field alike
//! (the log has one number; the user chose which). A limit that settles
//! `from = "estimate"` keeps its estimate, and a concurrency limit gives its
//! slot back, as on the server. Without a cost the estimate stands; status
//! rules apply either way.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use http::{HeaderMap, HeaderValue};
use sluice_core::{Clock, ManualClock, Nanos};
use sluice_policy::settlement::{Observed, SettleFrom, TokenUsage};
use sluice_policy::{Engine, Reservation, SettledLimit};
use sluice_store::seam::now_or_never;

use super::Simulator;

/// The most admitted requests the replay keeps in flight (about 64 Ki,
/// a few hundred bytes each). Past it, the request that ends soonest is
/// settled early, at the time of the line that overflowed, and counted.
pub const MAX_IN_FLIGHT: usize = 1 << 16;

/// What a line says of its response.
#[derive(Debug, Clone, Copy)]
pub(super) struct Seen {
    /// The status.
    pub(super) status: Option<u16>,
    /// The actual cost, when the cost field holds one.
    pub(super) cost: Option<u64>,
}

/// An admitted request in flight until `end`.
#[derive(Debug)]
pub(super) struct InFlight {
    end: Nanos,
    /// The order of admission: requests ending together settle in it.
    seq: u64,
    reservation: Reservation,
    seen: Seen,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.end, self.seq) == (other.end, other.seq)
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.end, self.seq).cmp(&(other.end, other.seq))
    }
}

/// The requests in flight, soonest end first.
#[derive(Debug, Default)]
pub(super) struct Flights {
    heap: BinaryHeap<Reverse<InFlight>>,
    seq: u64,
    /// Reused for every settlement: the cost as each header or trailer a
    /// rule reads.
    fields: HeaderMap,
}

impl Simulator {
    /// Holds an admitted request's reservation until its end (`start` plus
    /// `duration`), or settles it now when it has no duration.
    pub(super) fn hold(
        &mut self,
        reservation: Reservation,
        start: Nanos,
        duration: Option<Nanos>,
        seen: Seen,
    ) {
        let Some(d) = duration.filter(|d| *d > 0) else {
            self.settle_one(&reservation, seen);
            return;
        };
        let f = &mut self.flights;
        f.seq += 1;
        f.heap.push(Reverse(InFlight {
            end: start.saturating_add(d),
            seq: f.seq,
            reservation,
            seen,
        }));
        if f.heap.len() > MAX_IN_FLIGHT
            && let Some(Reverse(early)) = f.heap.pop()
        {
            self.agg.costs.settled_early += 1;
            self.settle_one(&early.reservation, early.seen);
        }
    }

    /// Settles, each at its end, every request in flight that ends by
    /// `until`. The clock is then at the last end (never moved back).
    pub(super) fn settle_until(&mut self, until: Nanos) {
        while let Some(Reverse(next)) = self.flights.heap.peek() {
            if next.end > until {
                return;
            }
            let Some(Reverse(done)) = self.flights.heap.pop() else {
                return;
            };
            self.clock.set(done.end.max(self.clock.now()));
            self.settle_one(&done.reservation, done.seen);
        }
    }

    /// Settles every request still in flight, each at its end: the log is
    /// over. [`replay`](Self::replay) does this at the end of its log;
    /// after lines given one by one to [`line`](Self::line), call it before
    /// the [`report`](Self::report). A later line is decided no earlier
    /// than the last end.
    pub fn finish(&mut self) {
        self.settle_until(Nanos::MAX);
        self.latest = self.latest.max(self.clock.now());
    }

    /// Settles one reservation at the clock's time, and counts it.
    fn settle_one(&mut self, reservation: &Reservation, seen: Seen) {
        let settled = settle(&self.engine, &mut self.flights.fields, reservation, seen);
        self.agg.record_settled(&settled);
    }
}

/// Settles a reservation with what its line saw: the cost as every source
/// a rule reads (see the module's doc).
fn settle(
    engine: &Engine<ManualClock>,
    fields: &mut HeaderMap,
    reservation: &Reservation,
    seen: Seen,
) -> Vec<SettledLimit> {
    fields.clear();
    if let Some(cost) = seen.cost {
        for r in reservation.items() {
            if let SettleFrom::Header(name) | SettleFrom::Trailer(name) = &r.rule.from {
                fields.insert(name.clone(), HeaderValue::from(cost));
            }
        }
    }
    let fields: &HeaderMap = fields;
    let observed = Observed {
        status: seen.status,
        headers: seen.cost.map(|_| fields),
        trailers: seen.cost.map(|_| fields),
        body_bytes: seen.cost,
        usage: seen.cost.map(|c| TokenUsage {
            prompt: c,
            completion: c,
            total: c,
        }),
        reported: seen.cost,
    };
    // The memory store settles at once.
    now_or_never(engine.settle(reservation, &observed)).unwrap_or_default()
}
