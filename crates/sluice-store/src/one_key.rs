//! A GCRA limit whose one key is named when it is registered (a `global`
//! limit's: every request counts on the same key). That key's TAT is one
//! atomic word outside any map and any lock, as governor's direct limiter
//! keeps its state:
//!
//! - **A check of the key** loads the word and decides; an admitted
//!   request commits with one compare-and-swap, and a refused one writes
//!   no word but the limit's latest time (raised, as a shard's is, only
//!   when the check's time is later). No lock is taken, so checks from
//!   every thread run side by side.
//! - **A pair** of this key and another limit's check (a global cap
//!   beside a per-client limit, decided all or nothing) holds the other's
//!   shard and reads the word without holding it: both are decided, and
//!   the word is committed last with a compare-and-swap; if the word moved
//!   meanwhile, the pair is decided again (`MemoryStore::pair`).
//! - **Everything else holds the word** ([`OneKeyTable::lock`]): a larger
//!   group, a refund, a peek. A holder takes the holders' mutex and sets
//!   the word's top bit, which no TAT has: a check that loads the word with
//!   that bit set, or whose compare-and-swap finds it set, commits nothing
//!   and waits on the mutex, then decides as a holder. The holder decides
//!   on the TAT it took, and puts the word back (the bit clear) when it is
//!   done.
//!
//! Every decision is made at the latest time the limit has seen, as in a
//! shard of the [atomic table](crate::atomic_table): the same decisions,
//! the same arithmetic ([`AtomicGcra`]). Other keys (a caller that names
//! another) go to an atomic table beside it, so a wrong hint costs only
//! speed. The key is never forgotten: one word per limit.

use std::sync::atomic::Ordering;

use sluice_core::algorithms::gcra::GcraState;
use sluice_core::{Algorithm, CheckError, Debited, Decision, Gcra, Nanos, Outcome};

use crate::atomic_gcra::AtomicGcra;
use crate::atomic_table::{AtomicTable, raise};
use crate::key::KeyId;
use crate::sync::{AtomicU64, Mutex, MutexGuard};

/// The word's bit that marks it held; no TAT reaches it (a TAT stays
/// below 2^63: [`AtomicGcra::for_gcra`]).
const HELD: u64 = 1 << 63;

/// The shard index that names the one key's word (the other keys' shards
/// are those of the table beside it).
pub(crate) const ONE: usize = usize::MAX;

/// A GCRA limit with one key kept apart. See the module docs.
pub(crate) struct OneKeyTable {
    one: OneKey,
    /// Every other key.
    rest: AtomicTable,
}

impl std::fmt::Debug for OneKeyTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneKeyTable")
            .field("rest", &self.rest)
            .finish_non_exhaustive()
    }
}

/// The one key's word, its limit's latest time, and its holders' mutex
/// (which keeps the TAT a holder works on). The word's arithmetic is the
/// table beside it's ([`OneKeyTable::fast`]).
struct OneKey {
    key: KeyId,
    word: AtomicU64,
    high: AtomicU64,
    holders: Mutex<Nanos>,
}

impl OneKeyTable {
    /// The table of `rest`'s limit with `key` kept apart.
    pub(crate) fn new(key: KeyId, rest: AtomicTable) -> Self {
        Self {
            one: OneKey {
                key,
                word: AtomicU64::new(0),
                high: AtomicU64::new(0),
                holders: Mutex::new(0),
            },
            rest,
        }
    }

    /// The algorithm.
    pub(crate) fn algorithm(&self) -> &Gcra {
        self.rest.algorithm()
    }

    /// The one key's word, or (out of line, so that the callers of the
    /// usual table's check stay as small) the other keys' table.
    #[inline(always)]
    pub(crate) fn check(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        if key == self.one.key {
            self.check_one(now, cost)
        } else {
            self.check_rest(key, now, cost)
        }
    }

    #[inline(never)]
    fn check_rest(&self, key: KeyId, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        self.rest.check(key, now, cost)
    }

    /// [`ONE`] for the one key, else its shard of the other keys' table.
    #[inline]
    pub(crate) fn shard_of(&self, key: KeyId) -> usize {
        if key == self.one.key {
            ONE
        } else {
            self.rest.shard_of(key)
        }
    }

    /// The other keys' table (for a shard of it, [`shard_of`](Self::shard_of)).
    pub(crate) fn rest(&self) -> &AtomicTable {
        &self.rest
    }

    /// The one key.
    pub(crate) fn key(&self) -> KeyId {
        self.one.key
    }

    /// The one key's TAT, for a group that decides beside the word without
    /// holding it (`MemoryStore::pair`): `None` while a holder has it.
    #[inline]
    pub(crate) fn peek_word(&self) -> Option<Nanos> {
        let word = self.one.word.load(Ordering::Acquire);
        (word & HELD == 0).then_some(word)
    }

    /// Moves the one key's latest time to `now` unless it has seen later;
    /// returns the time to decide at (read after [`peek_word`](Self::peek_word),
    /// it is no earlier than the time of the commit whose TAT was read).
    #[inline]
    pub(crate) fn advance(&self, now: Nanos) -> Nanos {
        raise(&self.one.high, now)
    }

    /// Commits `tat` to the word if it still holds `current` (what
    /// [`peek_word`](Self::peek_word) read); `false` if a check or a
    /// holder moved it since.
    #[inline]
    pub(crate) fn commit_word(&self, current: Nanos, tat: Nanos) -> bool {
        self.one
            .word
            .compare_exchange(current, tat, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// The word's atomic GCRA: the other keys' table's.
    pub(crate) fn fast(&self) -> &AtomicGcra {
        self.rest.fast()
    }

    /// Holds the one key's word: checks of the key wait until the holder
    /// is dropped.
    pub(crate) fn lock(&self) -> OneGuard<'_> {
        let mut tat = self.one.holders.lock();
        *tat = self.one.word.fetch_or(HELD, Ordering::AcqRel) & !HELD;
        OneGuard { table: self, tat }
    }

    /// Forgets every fully replenished key of the others (the one key is
    /// kept: one word). Returns how many.
    pub(crate) fn purge(&self, now: Nanos) -> usize {
        self.rest.purge(now)
    }

    /// The number of keys held: the one key's, once it has a TAT.
    pub(crate) fn len(&self) -> usize {
        let one = self.one.word.load(Ordering::Acquire) & !HELD != 0;
        self.rest.len() + usize::from(one)
    }

    /// The most keys this table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.rest.capacity() + 1
    }

    /// The per-shard cap of the other keys' table.
    pub(crate) fn per_shard_cap(&self) -> usize {
        self.rest.per_shard_cap()
    }
}

impl OneKeyTable {
    /// Checks the one key and commits an admitted request, without a lock
    /// unless a holder has the word (see the module docs).
    #[inline(always)]
    fn check_one(&self, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        let (one, fast) = (&self.one, self.fast());
        let now = raise(&one.high, now);
        let committed =
            fast.commit_unless_held::<_, HELD>(&one.word, now, Some(&one.high), cost)?;
        match committed {
            Some(raw) => Ok(fast.decision(raw)),
            None => self.check_held(now, cost),
        }
    }

    /// A check that found the word held: decided as a holder, once the
    /// holder is done.
    #[cold]
    #[inline(never)]
    fn check_held(&self, now: Nanos, cost: u64) -> Result<Decision, CheckError> {
        let mut held = self.lock();
        let now = held.advance(now);
        let raw = self.fast().decide(*held.tat, now, cost)?;
        if raw.allowed() && cost > 0 {
            *held.tat = raw.tat(now);
        }
        Ok(self.fast().decision(raw))
    }
}

/// The one key's word, held (see [`OneKeyTable::lock`]): the TAT the
/// holder reads and moves (in the holders' mutex), put back in the word
/// when dropped.
pub(crate) struct OneGuard<'a> {
    /// The table (as a guard of any table names its own).
    pub(crate) table: &'a OneKeyTable,
    tat: MutexGuard<'a, Nanos>,
}

impl Drop for OneGuard<'_> {
    fn drop(&mut self) {
        // The bit clear: checks go on from this TAT. The holders' mutex is
        // let go after, with the field.
        self.table.one.word.store(*self.tat, Ordering::Release);
    }
}

impl OneGuard<'_> {
    /// The latest time the limit has seen.
    pub(crate) fn high(&self) -> Nanos {
        self.table.one.high.load(Ordering::Relaxed)
    }

    /// Moves the limit's latest time to `now` unless it has seen later.
    pub(crate) fn advance(&mut self, now: Nanos) -> Nanos {
        raise(&self.table.one.high, now)
    }

    /// Checks the key without committing. (Only the one key is routed
    /// here: [`OneKeyTable::shard_of`].)
    pub(crate) fn peek<A: Algorithm<State = GcraState>>(
        &self,
        alg: &A,
        _key: KeyId,
        now: Nanos,
        cost: u64,
    ) -> Result<Outcome<A::Update>, CheckError> {
        alg.check(&GcraState::from_tat(u128::from(*self.tat)), now, cost)
    }

    /// Gives back `amount` of the key's charged cost at `now`.
    pub(crate) fn refund<A: Algorithm<State = GcraState>>(
        &mut self,
        alg: &A,
        _key: KeyId,
        now: Nanos,
        amount: u64,
    ) {
        let mut s = GcraState::from_tat(u128::from(*self.tat));
        alg.refund(&mut s, now, amount);
        *self.tat = word(&s);
    }

    /// Charges `amount` to the key at `now`, into debt up to `max_debt`
    /// (see [`Algorithm::debit`]). The word keeps a TAT below [`HELD`]:
    /// what would take it further is excess, as debt past `max_debt` is.
    pub(crate) fn debit<A: Algorithm<State = GcraState>>(
        &mut self,
        alg: &A,
        _key: KeyId,
        (now, _cap): (Nanos, usize),
        amount: u64,
        max_debt: u64,
    ) -> Debited {
        let mut s = GcraState::from_tat(u128::from(*self.tat));
        // The most the word can take, in units of the interval (the atomic
        // table's GCRA has a scale of 1).
        let interval = self.table.algorithm().reduced_rate().1.max(1);
        let base = (*self.tat).max(now);
        let fits = (HELD - 1).saturating_sub(base) / interval;
        let asked = amount.min(fits);
        let debited = alg.debit(&mut s, now, asked, max_debt);
        *self.tat = word(&s);
        Debited {
            charged: debited.charged,
            excess: amount - debited.charged,
        }
    }

    /// Commits an update to the key.
    pub(crate) fn commit<A: Algorithm<State = GcraState, Update = GcraState>>(
        &mut self,
        alg: &A,
        _key: KeyId,
        update: GcraState,
        _now: Nanos,
        _cap: usize,
    ) {
        let mut s = GcraState::from_tat(u128::from(*self.tat));
        alg.apply(&mut s, update);
        *self.tat = word(&s);
    }
}

/// GCRA's state as a TAT, below [`HELD`] (as [`AtomicGcra::for_gcra`]
/// keeps every TAT).
fn word(s: &GcraState) -> u64 {
    crate::atomic_table::word(s).min(HELD - 1)
}
