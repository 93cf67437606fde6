//! A GCRA limit's table in the memory store, the fast design: each key's
//! state is one atomic word (its theoretical arrival time, in nanoseconds),
//! and its shard's lock is a reader-writer lock.
//!
//! - **A check of one known key** (the usual request) takes the shard's
//!   lock *shared*, finds the key and decides with one compare-and-swap
//!   ([`AtomicGcra`]): checks of one shard run side by side, and the
//!   decision's arithmetic stays in 64 bits.
//! - **Two known keys decided together**, all or nothing (an IP guard
//!   beside a key's plan), take both shards' locks shared too, in the
//!   store's global order, and *hold* both words: each marked by its
//!   [`HELD`] bit, also in that order. A check that finds a word held
//!   waits until it is released, a few instructions later, with the pair's
//!   decision written.
//! - **Everything else takes the lock exclusively**: a new key (and the
//!   eviction it may need), a larger group of checks decided all or
//!   nothing (as every table's shards are locked for it: no check can move
//!   a word of a locked shard meanwhile), refunds and purges. Those decide
//!   with [`Gcra`] itself, on the word read as a [`GcraState`]. No word is
//!   held while a shard is locked exclusively: only a holder of the shared
//!   lock holds one, and it releases the word first.
//!
//! The table is used for GCRA whose emission interval is a whole number of
//! nanoseconds (`AtomicGcra::for_gcra`); it decides exactly as the mutex
//! table does. Each check decides at its caller's clock reading. A reading
//! earlier than the one that committed the TAT it reads (another thread's
//! clock a little ahead) can only refuse more, never admit more: GCRA
//! decides from `max(TAT, now)`, and its `Retry-After` is then longer.
//!
//! The words are [`crate::sync`]'s `AtomicU64`: `std`'s, or shuttle's in the
//! model check, which then controls their interleavings as it does the
//! locks'.

use std::sync::atomic::Ordering;

use sluice_core::algorithms::gcra::GcraState;
use sluice_core::{Algorithm, CheckError, Debited, Decision, Gcra, Nanos, Outcome};

use crate::atomic_gcra::{AtomicGcra, HELD, Raw};
use crate::key::KeyId;
use crate::sync::{AtomicU64, RwLock, RwLockWriteGuard};
use crate::table::{KeyMap, make_room};

/// The keys of one shard, each its TAT.
pub(crate) struct TatMap {
    map: KeyMap<AtomicU64>,
}

#[repr(align(128))]
struct Shard(RwLock<TatMap>);

/// The state of one GCRA limit over all its keys. See the module docs.
pub(crate) struct AtomicTable {
    fast: AtomicGcra,
    shards: Box<[Shard]>,
    mask: usize,
    per_shard_cap: usize,
}

impl std::fmt::Debug for AtomicTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicTable")
            .field("shards", &self.shards.len())
            .field("per_shard_cap", &self.per_shard_cap)
            .finish_non_exhaustive()
    }
}

impl AtomicTable {
    /// The table of `gcra`, if it has an atomic form; `shards` (a power of
    /// two) holding at most `max_keys` keys.
    pub(crate) fn new(gcra: Gcra, shards: usize, max_keys: usize) -> Option<Self> {
        let fast = AtomicGcra::for_gcra(&gcra)?;
        let n = shards.next_power_of_two();
        let shards = (0..n)
            .map(|_| {
                Shard(RwLock::new(TatMap {
                    map: KeyMap::default(),
                }))
            })
            .collect();
        Some(Self {
            fast,
            shards,
            mask: n - 1,
            per_shard_cap: max_keys.div_ceil(n).max(1),
        })
    }

    /// The algorithm.
    pub(crate) fn algorithm(&self) -> &Gcra {
        self.fast.gcra()
    }

    /// The shard index of a key.
    #[inline]
    pub(crate) fn shard_of(&self, key: KeyId) -> usize {
        key.shard(self.mask)
    }

    /// Locks one shard exclusively (a group's decision, a refund).
    pub(crate) fn lock(&self, shard: usize) -> RwLockWriteGuard<'_, TatMap> {
        self.shards[shard].0.write()
    }

    /// Checks one key and commits an admitted request: the fast path.
    #[inline(always)]
    pub(crate) fn check(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        let shard = &self.shards[self.shard_of(key)].0;
        let committed = {
            let m = shard.read();
            m.map
                .get(&key.low())
                .map(|tat| self.fast.commit(tat, now, cost))
        };
        match committed {
            Some(raw) => raw.map(|r| self.fast.decision(r)),
            None => self.insert(shard, key, now, cost),
        }
    }

    /// A check of a key not found under the shared lock.
    #[cold]
    fn insert(
        &self,
        shard: &RwLock<TatMap>,
        key: KeyId,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, CheckError> {
        let mut m = shard.write();
        if let Some(tat) = m.map.get(&key.low()) {
            return self.fast.check(tat, now, cost);
        }
        let (decision, tat) = self.fast.check_fresh(now, cost)?;
        if let Some(tat) = tat {
            m.insert(key.low(), tat, now, self.per_shard_cap);
        }
        Ok(decision)
    }

    /// Forgets every fully replenished key. Returns how many.
    pub(crate) fn purge(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| {
                let mut m = s.0.write();
                let before = m.map.len();
                m.map.retain(|_, tat| *tat.get_mut() > now);
                before - m.map.len()
            })
            .sum()
    }

    /// The number of keys held.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.0.read().map.len()).sum()
    }

    /// The most keys this table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.per_shard_cap * self.shards.len()
    }

    /// The per-shard cap.
    pub(crate) fn per_shard_cap(&self) -> usize {
        self.per_shard_cap
    }
}

/// One of two checks decided together on GCRA tables, with its shard held
/// exclusively: the table, its shard, the key and the cost.
pub(crate) type Held<'a, 'g> = (&'a AtomicTable, &'g mut TatMap, KeyId, u64);

/// One of two checks decided together on GCRA tables under shared locks:
/// the table, the shard's index, the key and the cost.
pub(crate) type Shared<'a> = (&'a AtomicTable, usize, KeyId, u64);

/// Two checks of known keys on GCRA tables (on different slots, given in
/// the store's lock order) decided together, all or nothing, at `now`,
/// under both shards' shared locks: each word held ([`HELD`]) in that
/// order, both decided as [`decide_pair`] decides, then both released with
/// their new TATs. `None` when a key is not held yet: the caller then
/// takes the exclusive path, which inserts it.
pub(crate) fn decide_pair_shared(
    a: Shared<'_>,
    b: Shared<'_>,
    now: Nanos,
) -> Option<Result<(bool, Decision, Decision), CheckError>> {
    let (ta, sa, ka, ca) = a;
    let (tb, sb, kb, cb) = b;
    let ma = ta.shards[sa].0.read();
    let wa = ma.map.get(&ka.low())?;
    let mb = tb.shards[sb].0.read();
    let wb = mb.map.get(&kb.low())?;
    let (tat_a, tat_b) = (hold(wa), hold(wb));
    let decided = ta
        .fast
        .decide(tat_a, now, ca)
        .and_then(|ra| Ok((ra, tb.fast.decide(tat_b, now, cb)?)));
    let (ra, rb) = match decided {
        Ok(raws) => raws,
        Err(e) => {
            wa.store(tat_a, Ordering::Release);
            wb.store(tat_b, Ordering::Release);
            return Some(Err(e));
        }
    };
    let allowed = ra.allowed() && rb.allowed();
    let (da, new_a) = outcome(ta, tat_a, ca, ra, allowed, now);
    let (db, new_b) = outcome(tb, tat_b, cb, rb, allowed, now);
    wa.store(new_a.unwrap_or(tat_a), Ordering::Release);
    wb.store(new_b.unwrap_or(tat_b), Ordering::Release);
    Some(Ok((allowed, da, db)))
}

/// Holds a word (under its shard's shared lock): waits while another pair
/// holds it, then marks it held. Returns its TAT.
#[inline]
fn hold(word: &AtomicU64) -> Nanos {
    let backoff = crossbeam_utils::Backoff::new();
    loop {
        let current = word.load(Ordering::Relaxed);
        if current & HELD != 0 {
            crate::sync::spin(&backoff);
            continue;
        }
        if word
            .compare_exchange_weak(
                current,
                current | HELD,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_ok()
        {
            return current;
        }
    }
}

/// Two checks on GCRA tables (on different shards) decided together, all
/// or nothing, at `now`, with both shards held exclusively (the caller
/// takes the locks in order and advances both to `now`): the steps of the
/// memory store's group decision (each peeked, both committed if both
/// admit, else each answered as it stands), on the words themselves.
/// Returns whether the request was admitted and each check's decision.
pub(crate) fn decide_pair(
    a: Held<'_, '_>,
    b: Held<'_, '_>,
    now: Nanos,
) -> Result<(bool, Decision, Decision), CheckError> {
    let (ta, ma, ka, ca) = a;
    let (tb, mb, kb, cb) = b;
    // Each key is looked up once: its word (if held) is read, and written
    // if the request is admitted; a key not held is inserted after.
    let (wa, wb) = (ma.map.get(&ka.low()), mb.map.get(&kb.low()));
    let (tat_a, tat_b) = (tat(wa), tat(wb));
    let ra = ta.fast.decide(tat_a, now, ca)?;
    let rb = tb.fast.decide(tat_b, now, cb)?;
    let allowed = ra.allowed() && rb.allowed();
    let (da, new_a) = outcome(ta, tat_a, ca, ra, allowed, now);
    let (db, new_b) = outcome(tb, tat_b, cb, rb, allowed, now);
    match (new_a, wa) {
        (Some(t), Some(w)) => w.store(t, Ordering::Release),
        (Some(t), None) => ma.insert(ka.low(), t, now, ta.per_shard_cap),
        (None, _) => {}
    }
    match (new_b, wb) {
        (Some(t), Some(w)) => w.store(t, Ordering::Release),
        (Some(t), None) => mb.insert(kb.low(), t, now, tb.per_shard_cap),
        (None, _) => {}
    }
    Ok((allowed, da, db))
}

/// A word's TAT under the exclusive lock: 0 (long past) for a key not held.
#[inline]
fn tat(word: Option<&AtomicU64>) -> Nanos {
    word.map_or(0, |w| w.load(Ordering::Relaxed))
}

/// One check's decision once its group's fate is known, and its new TAT
/// if it moves: when the request is admitted, the TAT it commits; when it
/// is not, the refusal, or (for a check that would have admitted it) the
/// key as it stands, uncharged.
fn outcome(
    table: &AtomicTable,
    current: Nanos,
    cost: u64,
    raw: Raw,
    allowed: bool,
    now: Nanos,
) -> (Decision, Option<Nanos>) {
    if allowed {
        let moved = (cost > 0).then(|| raw.tat(now));
        (table.fast.decision(raw), moved)
    } else if raw.allowed() {
        // Cost 0 is within every burst.
        let stands = table
            .fast
            .decide(current, now, 0)
            .map_or_else(|_| table.fast.decision(raw), |r| table.fast.decision(r));
        (stands, None)
    } else {
        (table.fast.decision(raw), None)
    }
}

/// A TAT as GCRA's state (a scale of 1: nanoseconds).
fn state(tat: &AtomicU64) -> GcraState {
    GcraState::from_tat(u128::from(tat.load(Ordering::Acquire)))
}

/// GCRA's state as a TAT, below [`HELD`] whatever the state (a debit
/// already stops short of it): no word written under the exclusive lock can
/// look held.
pub(crate) fn word(s: &GcraState) -> u64 {
    u64::try_from(s.tat()).map_or(HELD - 1, |t| t.min(HELD - 1))
}

impl TatMap {
    /// Checks a key without committing (under the exclusive lock).
    pub(crate) fn peek<A: Algorithm<State = GcraState>>(
        &self,
        alg: &A,
        key: KeyId,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<A::Update>, CheckError> {
        match self.map.get(&key.low()) {
            Some(tat) => alg.check(&state(tat), now, cost),
            None => alg.check(&GcraState::default(), now, cost),
        }
    }

    /// Gives back `amount` of a key's charged cost at `now`; a key not
    /// held here is full already.
    pub(crate) fn refund<A: Algorithm<State = GcraState>>(
        &mut self,
        alg: &A,
        key: KeyId,
        now: Nanos,
        amount: u64,
    ) {
        if let Some(tat) = self.map.get(&key.low()) {
            let mut s = state(tat);
            alg.refund(&mut s, now, amount);
            tat.store(word(&s), Ordering::Release);
        }
    }

    /// Charges `amount` to a key at `now`, into debt up to `max_debt` (see
    /// [`Algorithm::debit`]); a key not held is taken in when anything is
    /// charged, as a committed check takes it in. The debt stops short of
    /// [`HELD`]: what would run the TAT to it is excess.
    pub(crate) fn debit(
        &mut self,
        alg: &Gcra,
        key: KeyId,
        (now, cap): (Nanos, usize),
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let held = self.map.get(&key.low());
        let mut s = held.map_or_else(GcraState::default, state);
        // A scale of 1: the TAT in nanoseconds, `interval` ns a unit.
        let (_, interval) = alg.reduced_rate();
        let full = u64::try_from(alg.tolerance()).map_or(u64::MAX, |t| now.saturating_add(t));
        let room = (HELD - 1).saturating_sub(full) / interval.max(1);
        let debited = alg.debit(&mut s, now, amount, max_debt.min(room));
        if debited.charged > 0 {
            match held {
                Some(tat) => tat.store(word(&s), Ordering::Release),
                None => self.insert(key.low(), word(&s), now, cap),
            }
        }
        debited
    }

    /// Commits an update to a key (under the exclusive lock).
    pub(crate) fn commit<A: Algorithm<State = GcraState, Update = GcraState>>(
        &mut self,
        alg: &A,
        key: KeyId,
        update: GcraState,
        now: Nanos,
        cap: usize,
    ) {
        match self.map.get(&key.low()) {
            Some(tat) => {
                let mut s = state(tat);
                alg.apply(&mut s, update);
                tat.store(word(&s), Ordering::Release);
            }
            None => self.insert(key.low(), word(&update), now, cap),
        }
    }

    /// Stores a new key's TAT, first making room in a full shard: forget
    /// replenished keys (a TAT not after now), then the eighth closest to
    /// replenishment (erring towards admitting, as every table does).
    fn insert(&mut self, key: u64, tat: u64, now: Nanos, cap: usize) {
        if self.map.len() >= cap {
            self.make_room(now, cap);
        }
        self.map.insert(key, AtomicU64::new(tat));
    }

    fn make_room(&mut self, now: Nanos, cap: usize) {
        make_room(&mut self.map, now, cap, |tat| *tat.get_mut());
    }
}
