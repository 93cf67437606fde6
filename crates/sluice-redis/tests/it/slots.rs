//! Concurrency slots in Redis (the script's algorithm 7): decided as
//! sluice-core's `Concurrency` call by call, shared by the instances on one
//! Redis, and held as leases per instance that expire unless renewed.

#![allow(clippy::unwrap_used)]

use crate::common;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestRunner};
use redis::AsyncCommands;
use sluice_core::algorithms::concurrency::ConcurrencyState;
use sluice_core::{Algorithm, AlgorithmKind, Concurrency, Decision, Limiter};
use sluice_redis::{BatchConfig, RedisCheck, RedisStore, key_name};
use sluice_store::KeyId;

use common::{env, fresh_id, limiter};

const SECOND: u64 = 1_000_000_000;

/// A fixed test clock, in microseconds.
const T0: u64 = 1_700_000_000_000_000;

fn slots(max: u64, lease: u64) -> Limiter {
    limiter(AlgorithmKind::Concurrency, max, lease, max, false)
}

fn check<'a>(id: &'a str, l: &'a Limiter, key: KeyId, cost: u64, reserve: u64) -> RedisCheck<'a> {
    RedisCheck {
        limit_id: id,
        limiter: l,
        key,
        cost,
        reserve,
    }
}

/// One step of the comparison: what is done, random bits for its amounts,
/// and how far the clock moves first (µs).
#[derive(Debug, Clone, Copy)]
struct Step {
    op: u8,
    x: u64,
    dt: u64,
}

/// sluice-core's decision for a check of `cost` keeping `reserve`, as the
/// memory store makes it: that of a limit `reserve` smaller on the same
/// slots (applied to the state only if admitted).
fn want_check(
    big: &Concurrency,
    s: &mut ConcurrencyState,
    now: u64,
    cost: u64,
    reserve: u64,
) -> Decision {
    let max = big.capacity();
    let small = Concurrency::new(max - reserve, big.lease()).unwrap();
    let o = small.check(s, now, cost).unwrap();
    if let Some(u) = o.update {
        big.apply(s, u);
    }
    Decision {
        limit: max,
        ..o.decision
    }
}

#[test]
fn slots_on_one_instance_equal_sluice_core_call_by_call() {
    let Some(env) = env() else { return };
    let leases = [
        250_000_333u64,
        SECOND + 7,
        600 * SECOND,
        7 * 86_400 * SECOND,
    ];
    let step = (0u8..10, any::<u64>(), 0u64..=20).prop_map(|(op, x, dt)| Step { op, x, dt });
    let strategy = (
        prop::sample::select(leases.to_vec()),
        1u64..=8,
        prop::collection::vec(step, 1..40),
    );
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 120,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    runner
        .run(&strategy, |(lease, max, steps)| {
            let l = slots(max, lease);
            let big = Concurrency::new(max, lease).unwrap();
            let store = RedisStore::from_connection(env.conn.clone(), None);
            let id = fresh_id("slots-core");
            let key = KeyId(0x5107);
            let mut s = ConcurrencyState::default();
            let mut now = T0;
            for (i, st) in steps.iter().enumerate() {
                now += st.dt;
                let ns = now * 1000;
                let at = |what: &str| format!("step {i} ({what}) at {now} us");
                match st.op {
                    0..=4 => {
                        let reserve = if st.op == 4 { st.x % max } else { 0 };
                        let cost = (st.x >> 8) % (max - reserve + 1);
                        let want = want_check(&big, &mut s, ns, cost, reserve);
                        let c = check(&id, &l, key, cost, reserve);
                        let got = env.rt.block_on(store.check_at(&[c], now)).unwrap();
                        let what = format!("check {cost} keeping {reserve}");
                        prop_assert_eq!(got.decisions[0], want, "{}", at(&what));
                        prop_assert_eq!(got.allowed, want.allowed);
                    }
                    5..=7 => {
                        let cost = st.x % (2 * max + 1);
                        big.refund(&mut s, ns, cost);
                        let want = big.check(&s, ns, 0).unwrap().decision;
                        let c = check(&id, &l, key, cost, 0);
                        let got = env.rt.block_on(store.refund_at(&[c], now)).unwrap();
                        prop_assert_eq!(got.decisions[0], want, "{}", at("refund"));
                    }
                    _ => {
                        let amount = st.x % (2 * max + 2);
                        let max_debt = match (st.x >> 32) % 3 {
                            0 => 0,
                            1 => u64::MAX,
                            _ => (st.x >> 40) % (max + 1),
                        };
                        let want = big.debit(&mut s, ns, amount, max_debt);
                        let c = check(&id, &l, key, amount, 0);
                        let got = env.rt.block_on(store.debit_at(&c, max_debt, now));
                        prop_assert_eq!(got.unwrap(), want, "{}", at("debit"));
                    }
                }
            }
            Ok::<(), TestCaseError>(())
        })
        .unwrap();
}

/// Two stores (two instance ids) on one Redis, on Redis's own clock: they
/// share the slots of a key; a release frees a slot whichever of them it
/// reaches, its own first.
#[test]
fn two_instances_share_the_slots_of_a_key() {
    let Some(env) = env() else { return };
    let a = RedisStore::from_connection(env.conn.clone(), Some(BatchConfig::default()));
    let b = RedisStore::from_connection(env.conn.clone(), None);
    assert_ne!(a.instance_id(), b.instance_id());
    assert!(a.instance_id() < 1 << 52 && b.instance_id() < 1 << 52);
    let l = slots(3, 60 * SECOND);
    let id = fresh_id("slots-shared");
    let key = KeyId(0x5108);
    let take = |s: &RedisStore| {
        let c = check(&id, &l, key, 1, 0);
        env.rt.block_on(s.check(&[c])).unwrap().decisions[0]
    };
    assert!(take(&a).allowed);
    assert!(take(&a).allowed);
    let d = take(&b);
    assert_eq!(
        (d.allowed, d.remaining, d.reset_after),
        (true, 0, 60 * SECOND)
    );
    let d = take(&a);
    assert_eq!((d.allowed, d.retry_after), (false, Some(SECOND)));
    assert!(!take(&b).allowed);

    let mut conn = env.conn.clone();
    let name = key_name(&id, key);
    let state: Vec<u8> = env.rt.block_on(conn.get(&name)).unwrap();
    assert_eq!(state.len(), 2 * 24, "one entry per instance");
    let ttl: i64 = env.rt.block_on(conn.pttl(&name)).unwrap();
    assert!(ttl > 0 && ttl <= 60_000, "lives one lease: {ttl} ms");

    // B's release frees its own one; A takes it.
    let one = check(&id, &l, key, 1, 0);
    let d = env.rt.block_on(b.refund(&[one])).unwrap().decisions[0];
    assert_eq!(d.remaining, 1);
    assert!(take(&a).allowed);
    let d = take(&b);
    assert!(!d.allowed);
    // B, holding none, releases two: two of A's three come back.
    let two = check(&id, &l, key, 2, 0);
    let d = env.rt.block_on(b.refund(&[two])).unwrap().decisions[0];
    assert_eq!(d.remaining, 2, "B's release freed A's slots");
    // A gives back more than is held: all of it, never below none.
    let all = check(&id, &l, key, 10, 0);
    let d = env.rt.block_on(a.refund(&[all])).unwrap().decisions[0];
    assert_eq!(d.remaining, 3);
    let exists: bool = env.rt.block_on(conn.exists(&name)).unwrap();
    assert!(!exists, "no slot held: the key is gone");
}

/// The entries of a slots key: (instance id, slots held, expiry in µs).
fn entries(env: &common::Env, name: &str) -> Vec<(u64, u64, u64)> {
    let mut conn = env.conn.clone();
    let state: Option<Vec<u8>> = env.rt.block_on(conn.get(name)).unwrap();
    let f = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap()) as u64;
    state
        .unwrap_or_default()
        .chunks(24)
        .map(|e| (f(&e[..8]), f(&e[8..16]), f(&e[16..])))
        .collect()
}

/// On the test clock: a release by an instance that holds none of a key's
/// slots frees another instance's, the one whose lease ends soonest first,
/// and never takes an entry below none; an expired entry gives nothing.
#[test]
fn a_release_by_an_instance_holding_none_frees_another_s_slot() {
    let Some(env) = env() else { return };
    let stores: Vec<RedisStore> = (0..3)
        .map(|_| RedisStore::from_connection(env.conn.clone(), None))
        .collect();
    let (a, b, c) = (&stores[0], &stores[1], &stores[2]);
    let l = slots(3, SECOND);
    let id = fresh_id("slots-release-any");
    let key = KeyId(0x510a);
    let name = key_name(&id, key);
    let ms = |m: u64| T0 + m * 1000;
    let take = |s: &RedisStore, cost: u64, t: u64| {
        let ch = check(&id, &l, key, cost, 0);
        env.rt.block_on(s.check_at(&[ch], t)).unwrap().decisions[0]
    };
    let release = |s: &RedisStore, cost: u64, t: u64| {
        let ch = check(&id, &l, key, cost, 0);
        env.rt.block_on(s.refund_at(&[ch], t)).unwrap().decisions[0]
    };
    // B's lease ends at 1000 ms, A's at 1200 ms.
    assert!(take(b, 1, ms(0)).allowed);
    assert!(take(a, 2, ms(200)).allowed);
    assert!(!take(c, 1, ms(300)).allowed);
    // C holds none: its release frees B's slot, whose lease ends first.
    let d = release(c, 1, ms(300));
    assert_eq!((d.allowed, d.remaining), (true, 1));
    assert_eq!(entries(&env, &name), [(a.instance_id(), 2, ms(1200))]);
    // Then A's, one by one, never below none.
    assert_eq!(release(c, 1, ms(400)).remaining, 2);
    assert_eq!(entries(&env, &name), [(a.instance_id(), 1, ms(1200))]);
    assert_eq!(release(b, 5, ms(500)).remaining, 3);
    assert!(
        entries(&env, &name).is_empty(),
        "no slot held: the key is gone"
    );
    // An expired entry gives nothing: B's slot, taken at 600, has expired
    // by 1700; the release frees C's live one.
    assert!(take(b, 1, ms(600)).allowed);
    assert!(take(c, 2, ms(1500)).allowed);
    assert_eq!(release(a, 1, ms(1700)).remaining, 2);
    assert_eq!(entries(&env, &name), [(c.instance_id(), 1, ms(2500))]);
}

/// Leases of 1 s on the test clock: an instance's slots expire one lease
/// after it last took or renewed them; a peek by the holder renews them,
/// one by another instance does not.
#[test]
fn slots_expire_one_lease_after_their_holder_last_renewed_them() {
    let Some(env) = env() else { return };
    let stores: Vec<RedisStore> = (0..3)
        .map(|_| RedisStore::from_connection(env.conn.clone(), None))
        .collect();
    let (a, b, c) = (&stores[0], &stores[1], &stores[2]);
    let l = slots(3, SECOND);
    let id = fresh_id("slots-lease");
    let key = KeyId(0x5109);
    let ms = |m: u64| T0 + m * 1000;
    let at = |s: &RedisStore, cost: u64, t: u64| {
        let ch = check(&id, &l, key, cost, 0);
        env.rt.block_on(s.check_at(&[ch], t)).unwrap().decisions[0]
    };
    assert!(at(a, 2, ms(0)).allowed);
    assert!(at(b, 1, ms(500)).allowed);
    assert!(!at(c, 1, ms(600)).allowed);
    // A renews at 900 ms (until 1900); B's peek at 1400 renews B's only.
    let d = at(a, 0, ms(900));
    assert_eq!((d.allowed, d.remaining, d.reset_after), (true, 0, SECOND));
    assert!(at(b, 0, ms(1400)).allowed);
    assert!(!at(c, 1, ms(1400)).allowed, "A's renewed slots still held");
    assert!(!at(c, 1, ms(1899)).allowed);
    // At 1900 A's lease is over: its two slots are back, B still holds one.
    let d = at(c, 2, ms(1900));
    assert_eq!((d.allowed, d.remaining), (true, 0));
    // B's lease (renewed at 1400) ends at 2400; C's (taken at 1900) at 2900.
    assert_eq!(at(a, 0, ms(2399)).remaining, 0);
    assert_eq!(at(a, 0, ms(2400)).remaining, 1);
    let d = at(a, 0, ms(2900));
    assert_eq!((d.remaining, d.reset_after), (3, 0), "every lease is over");
    // A peek by a non-holder renewed nothing: A takes all three.
    assert!(at(a, 3, ms(2900)).allowed);
}
