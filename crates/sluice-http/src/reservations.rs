//! The reservations `POST /v1/check` hands out for limits that settle after
//! the response, until `POST /v1/settle` settles them.
//!
//! - An id is 128 random bits from the operating system (`getrandom`),
//!   shown as 32 hex digits: it cannot be guessed, so a client cannot settle
//!   another's reservation, and a settlement only moves the limits and key
//!   it was issued for.
//! - A reservation lives for `ttl`, or for the lease of its concurrency
//!   limits if shorter. One never settled **expires**: it is settled with
//!   nothing observed ([`drain_expired`](Reservations::drain_expired)), so
//!   a rate limit's estimate stands and a concurrency limit's slot is
//!   given back.
//! - The map is bounded (`max`): with it full, the reservation that would
//!   expire first expires now.
//! - Settled and expired ids are remembered for `ttl`, or 10 minutes if
//!   longer (at most `max` of them), so that a second settlement, or one that comes after its
//!   reservation expired, is told 409 rather than 404.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use sluice_policy::Reservation;

/// The shortest time a settled or expired id is remembered (at most `max`
/// of them are): a settlement that comes a little late is told so.
pub const REMEMBERED: Duration = Duration::from_secs(600);

/// A reservation's id: 128 random bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ReservationId(pub u128);

impl ReservationId {
    /// A new id from the operating system's random source; `None` when it
    /// cannot give one (the check then hands out no reservation).
    fn random() -> Option<Self> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes).ok()?;
        Some(Self(u128::from_le_bytes(bytes)))
    }

    /// The id as 32 lowercase hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// An id written as 32 hex digits; `None` for anything else.
    pub fn parse(text: &str) -> Option<Self> {
        (text.len() == 32 && text.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u128::from_str_radix(text, 16).ok().map(Self))
            .flatten()
    }
}

/// Why a settlement found no reservation to settle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Untaken {
    /// No such reservation: never issued, or forgotten (its memory is as
    /// bounded as the open ones).
    #[error("no such reservation (never issued, or expired long ago)")]
    Unknown,
    /// It was settled already.
    #[error("this reservation was settled already")]
    Settled,
    /// It expired unsettled, and was settled then with nothing observed:
    /// the settlement came too late.
    #[error("this reservation expired before it was settled, and was settled at its estimate then")]
    Expired,
}

/// Open reservations and recently settled ids. See the module docs.
#[derive(Debug)]
pub struct Reservations {
    inner: Mutex<Inner>,
    ttl: Duration,
    max: usize,
}

#[derive(Debug, Default)]
struct Inner {
    open: HashMap<ReservationId, (Instant, Reservation)>,
    /// Open ids by expiry.
    opened: BTreeSet<(Instant, ReservationId)>,
    /// Ids settled or expired (`true`) lately, until when they are
    /// remembered.
    settled: HashMap<ReservationId, (Instant, bool)>,
    settled_order: VecDeque<(Instant, ReservationId)>,
    /// Reservations that expired, waiting to be settled with nothing
    /// observed (at most `max`: each was open).
    expired_unsettled: Vec<Reservation>,
    /// Reservations that expired unsettled, so far.
    expired: u64,
}

impl Reservations {
    /// At most `max` open reservations (and as many remembered
    /// settlements), each living `ttl`.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            ttl,
            max: max.max(1),
        }
    }

    /// How long a reservation lives.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long a settled or expired id is remembered: `ttl`, and at
    /// least [`REMEMBERED`].
    fn remembered(&self) -> Duration {
        self.ttl.max(REMEMBERED)
    }

    /// Keeps `reservation` until it is settled or expires, and returns its
    /// id and how long it lives; `None` if no random id could be made.
    pub fn open(&self, reservation: Reservation) -> Option<(ReservationId, Duration)> {
        let id = ReservationId::random()?;
        let now = Instant::now();
        let ttl = reservation
            .lease()
            .map_or(self.ttl, |lease| self.ttl.min(Duration::from_nanos(lease)));
        let mut inner = self.inner.lock();
        inner.expire(now, self.remembered(), self.max);
        while inner.open.len() >= self.max {
            // Full: the first to expire expires now.
            let Some(first) = inner.opened.pop_first() else {
                break;
            };
            inner.expire_one(first.1, now + self.remembered(), self.max);
        }
        let until = now + ttl;
        inner.open.insert(id, (until, reservation));
        inner.opened.insert((until, id));
        Some((id, ttl))
    }

    /// The reservations that expired unsettled since the last call: settle
    /// each with nothing observed.
    pub fn drain_expired(&self) -> Vec<Reservation> {
        let mut inner = self.inner.lock();
        inner.expire(Instant::now(), self.remembered(), self.max);
        std::mem::take(&mut inner.expired_unsettled)
    }

    /// Keeps an open reservation for another lease (its own, or `ttl`)
    /// from now, and returns a copy of it to renew on the store, with how
    /// long it now lives.
    pub fn renew(&self, id: ReservationId) -> Result<(Reservation, Duration), Untaken> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.expire(now, self.remembered(), self.max);
        let Some((until, reservation)) = inner.open.get(&id) else {
            return Err(inner.untaken(id));
        };
        let (old, copy) = (*until, reservation.clone());
        let ttl = copy
            .lease()
            .map_or(self.ttl, |lease| self.ttl.min(Duration::from_nanos(lease)));
        let new = now + ttl;
        inner.opened.remove(&(old, id));
        inner.opened.insert((new, id));
        if let Some(entry) = inner.open.get_mut(&id) {
            entry.0 = new;
        }
        Ok((copy, ttl))
    }

    /// Takes an open reservation to settle it, remembering that it was.
    pub fn take(&self, id: ReservationId) -> Result<Reservation, Untaken> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.expire(now, self.remembered(), self.max);
        if let Some((until, reservation)) = inner.open.remove(&id) {
            inner.opened.remove(&(until, id));
            inner.remember(id, now + self.remembered(), false, self.max);
            return Ok(reservation);
        }
        Err(inner.untaken(id))
    }

    /// Open reservations now, and how many expired unsettled so far.
    pub fn counts(&self) -> (usize, u64) {
        let mut inner = self.inner.lock();
        inner.expire(Instant::now(), self.remembered(), self.max);
        (inner.open.len(), inner.expired)
    }

    /// The soonest expiry of an open reservation, if any.
    pub fn next_expiry(&self) -> Option<Duration> {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        inner.expire(now, self.remembered(), self.max);
        inner
            .opened
            .first()
            .map(|(until, _)| until.saturating_duration_since(now))
    }
}

impl Inner {
    /// Moves an open reservation (already out of `opened`) to those
    /// waiting to be settled with nothing observed, remembering it as
    /// expired until when it would have been remembered as settled.
    fn expire_one(&mut self, id: ReservationId, until: Instant, max: usize) {
        if let Some((_, reservation)) = self.open.remove(&id) {
            self.expired += 1;
            self.expired_unsettled.push(reservation);
            self.remember(id, until, true, max);
        }
    }

    /// Why `id` is not open.
    fn untaken(&self, id: ReservationId) -> Untaken {
        match self.settled.get(&id) {
            Some((_, false)) => Untaken::Settled,
            Some((_, true)) => Untaken::Expired,
            None => Untaken::Unknown,
        }
    }

    /// Remembers a settled (or `expired`) id until `until`, forgetting the
    /// oldest first when `max` are remembered.
    fn remember(&mut self, id: ReservationId, until: Instant, expired: bool, max: usize) {
        while self.settled.len() >= max {
            let Some((_, old)) = self.settled_order.pop_front() else {
                break;
            };
            self.settled.remove(&old);
        }
        self.settled.insert(id, (until, expired));
        self.settled_order.push_back((until, id));
    }

    /// Drops what expired by `now`.
    fn expire(&mut self, now: Instant, ttl: Duration, max: usize) {
        while let Some(&(until, id)) = self.opened.first() {
            if until > now {
                break;
            }
            self.opened.pop_first();
            self.expire_one(id, now + ttl, max);
        }
        while let Some(&(until, id)) = self.settled_order.front() {
            if until > now {
                break;
            }
            self.settled_order.pop_front();
            self.settled.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_random_and_read_back() {
        let a = ReservationId::random().unwrap();
        let b = ReservationId::random().unwrap();
        assert_ne!(a, b);
        assert_eq!(ReservationId::parse(&a.to_hex()), Some(a));
        assert_eq!(ReservationId::parse("xyz"), None);
        assert_eq!(ReservationId::parse(&"g".repeat(32)), None);
        assert_eq!(ReservationId::parse(&format!("+{}", "0".repeat(31))), None);
    }

    #[test]
    fn a_reservation_is_settled_once() {
        let r = Reservations::new(Duration::from_secs(60), 10);
        let (id, _) = r.open(Reservation::default()).unwrap();
        assert!(r.take(id).is_ok());
        assert_eq!(r.take(id).unwrap_err(), Untaken::Settled);
        assert_eq!(r.take(ReservationId(7)).unwrap_err(), Untaken::Unknown);
        assert_eq!(r.renew(id).unwrap_err(), Untaken::Settled);
    }

    #[test]
    fn a_renewed_reservation_lives_on() {
        let r = Reservations::new(Duration::from_millis(60), 10);
        let (id, _) = r.open(Reservation::default()).unwrap();
        std::thread::sleep(Duration::from_millis(40));
        assert!(r.renew(id).is_ok());
        std::thread::sleep(Duration::from_millis(40));
        assert!(r.take(id).is_ok(), "renewed 40 ms ago, for 60");
    }

    #[test]
    fn reservations_expire_and_the_map_is_bounded() {
        let r = Reservations::new(Duration::from_millis(30), 3);
        let ids: Vec<_> = (0..5)
            .map(|_| r.open(Reservation::default()).unwrap().0)
            .collect();
        assert_eq!(r.counts(), (3, 2), "the two oldest were dropped");
        assert_eq!(
            r.take(ids[0]).unwrap_err(),
            Untaken::Expired,
            "settled at its estimate already: too late"
        );
        assert_eq!(r.drain_expired().len(), 2, "to be settled");
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(r.counts(), (0, 5));
        assert_eq!(r.take(ids[4]).unwrap_err(), Untaken::Expired);
        assert_eq!(r.drain_expired().len(), 3);
        assert!(r.drain_expired().is_empty());
        assert_eq!(
            r.take(ids[0]).unwrap_err(),
            Untaken::Unknown,
            "forgotten: at most 3 remembered"
        );
    }
}
