//! Concurrency slots held under leases (`Check::lease`), alike on every
//! store: a lease frees its own slots only, once; it ends by itself one
//! lease after it was taken or last renewed, on the store's own clock
//! (Redis's, on Redis); and a release that comes late or twice frees no
//! one else's slot. The deployments run at once, each on its own thread,
//! since the scenario waits for leases to end.

use std::time::Duration;

use sluice_conformance::{Deployments, Kind, block, fresh_key, hasher};
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_store::seam::{Check, CounterDef, LeaseId};

/// How long a lease lasts.
const LEASE: Duration = Duration::from_secs(2);

/// The scenario on one deployment: each step's (allowed, remaining).
fn leased_run(d: &Deployments, kind: Kind) -> Vec<(bool, u64)> {
    let spec = LimitSpec {
        algorithm: AlgorithmKind::Concurrency,
        rate: Rate::new(2, LEASE.as_nanos() as u64).unwrap(),
        burst: 2,
        nodelay: false,
    };
    let (store, _) = d.stores(kind);
    let counter = store.counter(CounterDef::new("leased-slots", spec).unwrap());
    let key = hasher().key_id(&fresh_key("leased"));
    let at = |cost, lease| {
        [Check {
            counter: &counter,
            key,
            cost,
            reserve: 0,
            lease: Some(lease),
        }]
    };
    let show = |c: sluice_store::seam::Checked| (c.allowed, c.decisions[0].remaining);
    let take = |lease| show(block(store.check(&at(1, lease))).unwrap());
    let renew = |lease| show(block(store.check(&at(0, lease))).unwrap());
    let release = |lease| show(block(store.refund(&at(1, lease))).unwrap());
    let [a, b, c, e] = [(); 4].map(|_| LeaseId::random());
    let wait = |part: u32| std::thread::sleep(LEASE * part / 5);
    let mut seen = vec![take(a), take(b), take(c), release(a), release(a), take(c)];
    // Full: b and c hold the two slots. b is renewed (3/5 of a lease
    // later, and again as much later); c is not.
    wait(3);
    seen.push(renew(b));
    wait(3);
    // c's lease ended (6/5 of a lease after it was taken); b's did not.
    seen.push(renew(b));
    seen.push(take(e));
    // c's release comes late: it frees nothing, not b's or e's slot.
    seen.push(release(c));
    wait(6);
    // Both ended; b's late release frees nothing either.
    seen.push(release(b));
    seen.push(take(a));
    seen
}

/// The leases scenario on every deployment at once; every store answers as
/// the memory store does.
pub(crate) fn leases_end_by_themselves_and_free_only_their_own(d: &Deployments) {
    let runs: Vec<(Kind, Vec<(bool, u64)>)> = std::thread::scope(|s| {
        let handles: Vec<_> = d
            .kinds()
            .into_iter()
            .map(|kind| (kind, s.spawn(move || leased_run(d, kind))))
            .collect();
        handles
            .into_iter()
            .map(|(kind, h)| (kind, h.join().unwrap()))
            .collect()
    });
    let expected = [
        (true, 1),  // a
        (true, 0),  // b
        (false, 0), // c: full
        (true, 1),  // a released
        (true, 1),  // a again: nothing more
        (true, 0),  // c
        (true, 0),  // b renewed
        (true, 1),  // b renewed again; c ended
        (true, 0),  // e
        (true, 0),  // c late: nothing
        (true, 2),  // all ended; b late: nothing
        (true, 1),  // a anew
    ];
    for (kind, seen) in runs {
        assert_eq!(seen, expected, "leases on {kind:?}");
    }
}
