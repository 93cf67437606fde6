//! Failed admin authentications, limited per peer address.
//!
//! Each peer may fail [`BURST`] times at once, and [`PER_MINUTE`] times a
//! minute in the long run (GCRA: one more failure every 6 s). A peer whose
//! budget is spent is refused before its token is compared, until one more
//! failure would fit. Successes cost nothing.
//!
//! The state is a [`KeyedLimiter`]: at most [`MAX_PEERS`] addresses are
//! held; a full shard first forgets peers whose budget has refilled, then the
//! eighth closest to refilling. Only failures add a peer; a check of a peer
//! never seen adds nothing.

use std::net::IpAddr;

use sluice_core::{AlgorithmKind, Decision, LimitSpec, Nanos, Rate};
use sluice_store::KeyedLimiter;

/// Failures a peer may make at once.
pub(super) const BURST: u64 = 10;
/// Failures a peer may make a minute in the long run.
pub(super) const PER_MINUTE: u64 = 10;
/// The most peers whose failures are remembered at once.
pub(super) const MAX_PEERS: usize = 4096;

/// One failure's share of the budget's refill: a minute over [`PER_MINUTE`].
const INTERVAL: Nanos = 60_000_000_000 / PER_MINUTE;

/// The budget's limit.
const SPEC: LimitSpec = LimitSpec {
    algorithm: AlgorithmKind::Gcra,
    rate: Rate::per_minute(PER_MINUTE),
    burst: BURST,
    nodelay: false,
};

/// Who failed: a peer's address, or `None` for requests whose peer is not
/// known (they share one budget).
type Peer = Option<IpAddr>;

/// Failed authentications per peer. See the module docs.
#[derive(Debug)]
pub(super) struct Failures {
    limiter: KeyedLimiter<Peer>,
}

impl Failures {
    /// An empty record.
    pub(super) fn new() -> Self {
        Self {
            // The spec is a constant that builds (see the tests).
            #[allow(clippy::expect_used)]
            limiter: KeyedLimiter::new(&SPEC, MAX_PEERS).expect("the failure budget's spec builds"),
        }
    }

    /// `Some(wait)` when `peer` has no failure left: the time until one more
    /// would fit. Changes nothing.
    pub(super) fn locked_out(&self, peer: Peer) -> Option<Nanos> {
        match self.limiter.check(&peer, 0) {
            Ok(d) if d.allowed && d.remaining > 0 => None,
            Ok(d) => Some(wait_for_one(&d)),
            // A cost of 0 never exceeds the capacity.
            Err(_) => None,
        }
    }

    /// Records a failure of `peer`: counted, or over the budget when
    /// another request spent its last failure first.
    pub(super) fn fail(&self, peer: Peer) -> Failed {
        match self.limiter.check(&peer, 1) {
            Ok(d) if d.allowed => Failed::Counted {
                last: d.remaining == 0,
            },
            Ok(d) => Failed::Over(d.retry_after.unwrap_or(INTERVAL)),
            // A cost of 1 never exceeds the capacity of 10.
            Err(_) => Failed::Over(INTERVAL),
        }
    }
}

/// What [`Failures::fail`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Failed {
    /// Counted; `last` when it spent the peer's last failure.
    Counted {
        /// The peer has no failure left.
        last: bool,
    },
    /// The peer had no failure left: the time until one more would fit.
    Over(Nanos),
}

/// For a peek that found nothing left: the time until a cost of 1 fits.
/// The budget is whole `reset_after` from now; one failure fits once it is
/// at most `burst - 1` intervals from whole.
fn wait_for_one(d: &Decision) -> Nanos {
    if let Some(retry) = d.retry_after {
        return retry;
    }
    let one_short = INTERVAL * (BURST - 1);
    d.reset_after.saturating_sub(one_short).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_locked_out_after_its_burst_and_others_are_not() {
        let f = Failures::new();
        let me: Peer = Some("192.0.2.1".parse().unwrap());
        let other: Peer = Some("192.0.2.2".parse().unwrap());
        for i in 1..=BURST {
            assert_eq!(f.locked_out(me), None, "before failure {i}");
            let last = i == BURST;
            assert_eq!(f.fail(me), Failed::Counted { last });
        }
        let wait = f.locked_out(me).expect("locked out");
        assert!(wait > 0 && wait <= INTERVAL, "{wait}");
        assert!(matches!(f.fail(me), Failed::Over(w) if w > 0 && w <= INTERVAL));
        assert_eq!(f.locked_out(other), None);
        assert_eq!(f.locked_out(None), None);
    }

    #[test]
    fn checks_of_unknown_peers_hold_nothing() {
        let f = Failures::new();
        for i in 0..100u8 {
            assert_eq!(f.locked_out(Some(IpAddr::from([10, 0, 0, i]))), None);
        }
        assert!(f.limiter.is_empty());
        assert!(f.limiter.capacity() >= MAX_PEERS);
    }
}
