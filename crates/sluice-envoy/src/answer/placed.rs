//! Where each descriptor of a request goes: a charge, a refund, a record
//! of hits after a stream, or nowhere.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluice_policy::{Charge, Counting};
use sluice_store::seam::LeaseId;
use std::sync::Arc;

use super::{EnvoyRls, Place};
use crate::descriptor_key::descriptor_id;
use crate::rules::{Found, Rule};

/// A request's descriptors, placed: where each goes, and what to charge
/// and to refund.
pub(super) struct Placed<'f> {
    pub(super) places: Vec<Place>,
    pub(super) charges: Vec<Charge<'f>>,
    pub(super) refunds: Vec<Charge<'f>>,
    /// Hits recorded after the stream ended ([`stream_done`](crate::stream_done)):
    /// debited before the refunds, each of which then peeks its state.
    pub(super) debits: Vec<Charge<'f>>,
    /// Refused by limits of 0 before anything is charged: the charges
    /// only peek (cost 0).
    pub(super) zero: bool,
    /// The lease the request's concurrency slots are taken under: one per
    /// request that meets a concurrency rule, named in the answer
    /// ([`SLOTS_TAKEN`](super::SLOTS_TAKEN)) so that its release names it.
    pub(super) lease: Option<LeaseId>,
}

impl EnvoyRls {
    /// Where each descriptor goes (see [`Place`]), and the charges and
    /// refunds [`counted`](Self::counted) asks the engine for.
    pub(super) fn placed<'f>(
        &self,
        req: &RateLimitRequest,
        found: &'f [Option<Found<'_>>],
        overridden: &[Option<Arc<Rule>>],
        request_hits: u64,
        (records, leases): (&[bool], &[Option<LeaseId>]),
    ) -> Placed<'f> {
        let compat = self.options.compat;
        let hasher = self.engine.hasher();
        let zero = !compat && crate::counting::refused_by_zero(req, found);
        let mut places = Vec::with_capacity(found.len());
        let mut charges: Vec<Charge<'_>> = Vec::with_capacity(found.len());
        let mut back = GivenBack::default();
        let (mut enforced, mut later, mut lease) = (0, 0, None);
        for (i, (d, f)) in req.descriptors.iter().zip(found).enumerate() {
            // (Empty when no descriptor has a per-request limit.)
            let o = overridden.get(i).and_then(Option::as_ref);
            // A per-request limit is shared by every domain: its key names
            // the domain.
            let domain = if o.is_some() { req.domain.as_str() } else { "" };
            let record = records.get(i).copied().unwrap_or(false);
            if d.is_negative_hits || record {
                let charge = f.as_ref().and_then(|f| {
                    let limited = f.rule.limited()?;
                    Some(Charge {
                        limit: &limited.limit,
                        counter: &limited.counter,
                        key: descriptor_id(hasher, domain, d, &f.shared),
                        cost: hits_of(d, request_hits),
                        // Given back, or recorded, whatever the rule's mode.
                        counting: Counting::Enforced,
                        // A release names the lease its slots were taken
                        // under.
                        lease: leases.get(i).copied().flatten(),
                    })
                });
                places.push(Place::Refund(charge.map(|_| back.refunds.len())));
                if let Some(charge) = charge {
                    back.push(charge, record && !d.is_negative_hits);
                }
                continue;
            }
            let Some((f, limited)) = f.as_ref().and_then(|f| Some((f, f.rule.limited()?))) else {
                places.push(Place::None);
                continue;
            };
            let key = descriptor_id(hasher, domain, d, &f.shared);
            // In `compat` mode every descriptor is decided after (here,
            // without) the enforced ones, each on its own.
            let after = crate::counting::counting(f.rule, compat) != Counting::Enforced;
            if after && zero {
                places.push(Place::None);
                continue;
            }
            places.push(if after {
                later += 1;
                Place::Shadow(later - 1)
            } else {
                enforced += 1;
                Place::Enforced(enforced - 1)
            });
            charges.push(Charge {
                limit: &limited.limit,
                counter: &limited.counter,
                key,
                cost: if zero { 0 } else { cost_of(d, request_hits) },
                counting: crate::counting::counting(f.rule, compat),
                lease: slot_lease(f.rule.in_flight(), &mut lease),
            });
        }
        Placed {
            places,
            charges,
            refunds: back.refunds,
            debits: back.debits,
            zero,
            lease,
        }
    }
}

/// The refunds and the records of hits after a stream, as they are placed.
#[derive(Default)]
struct GivenBack<'f> {
    refunds: Vec<Charge<'f>>,
    debits: Vec<Charge<'f>>,
}

impl<'f> GivenBack<'f> {
    /// A refund, or a record (`record`): debited, then its state peeked
    /// (a refund of 0).
    fn push(&mut self, charge: Charge<'f>, record: bool) {
        if record {
            self.debits.push(charge);
            self.refunds.push(Charge { cost: 0, ..charge });
        } else {
            self.refunds.push(charge);
        }
    }
}

/// The lease of a charge on a concurrency rule (`in_flight`): the
/// request's one, drawn at the first.
fn slot_lease(in_flight: bool, lease: &mut Option<LeaseId>) -> Option<LeaseId> {
    in_flight.then(|| *lease.get_or_insert_with(LeaseId::random))
}

/// A descriptor's cost: its own `hits_addend`, else the request's; a
/// descriptor that gives quota back (`is_negative_hits`) costs nothing.
pub(super) fn cost_of(d: &RateLimitDescriptor, request_hits: u64) -> u64 {
    if d.is_negative_hits {
        0
    } else {
        hits_of(d, request_hits)
    }
}

/// A descriptor's hits: its own `hits_addend`, else the request's.
fn hits_of(d: &RateLimitDescriptor, request_hits: u64) -> u64 {
    d.hits_addend.as_ref().map_or(request_hits, |h| h.value)
}
