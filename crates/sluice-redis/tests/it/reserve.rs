//! A check's reserve: the cost a limit must keep after the charge, applied
//! by the script atomically with it (priority classes; a delay limit's
//! extended bucket decided as its plain one), honoured by the local
//! fallback, and kept apart by the over-limit cache.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use sluice_core::{AlgorithmKind, LimitSpec, Limiter, Rate};
use sluice_protect::ProtectOptions;
use sluice_redis::{RedisCheck, RedisStore, StoreUrl};
use sluice_store::KeyId;
use sluice_store::seam::{Check, Counter, CounterDef, DecidedBy, Fallback, Store};

use common::{KINDS, env, fresh_id, limiter};

const SECOND: u64 = 1_000_000_000;
const MINUTE: u64 = 60 * SECOND;

fn check<'a>(
    id: &'a str,
    limiter: &'a Limiter,
    key: KeyId,
    cost: u64,
    reserve: u64,
) -> RedisCheck<'a> {
    RedisCheck {
        limit_id: id,
        limiter,
        key,
        cost,
        reserve,
    }
}

/// One check at `now_us` on the test clock.
async fn at(store: &RedisStore, c: RedisCheck<'_>, now_us: u64) -> sluice_store::Checked {
    store.check_at(&[c], now_us).await.unwrap()
}

/// Every algorithm: with 6 of 10 used, a cost of 1 that must leave 4 is
/// refused and charged nothing; one that must leave 3 passes, and reports
/// what is left above its reserve; a check without a reserve may take the
/// rest.
#[test]
fn a_reserve_refuses_what_would_take_the_limit_below_it_and_charges_nothing() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let key = KeyId(5);
    // A fixed test clock (microseconds), well inside a window.
    let now = 1_000_000_000_000_u64;
    for kind in KINDS {
        // 1 per minute: nothing refills while the test runs on its clock.
        let l = limiter(kind, 1, MINUTE, 10, false);
        let id = fresh_id("reserve");
        env.rt.block_on(async {
            let d = at(&store, check(&id, &l, key, 6, 0), now).await;
            assert!(d.allowed, "{kind:?}");
            assert_eq!(d.decisions[0].remaining, 4, "{kind:?}");

            let d = at(&store, check(&id, &l, key, 1, 4), now).await;
            assert!(!d.allowed, "{kind:?}: 6 + 1 would leave 3 < 4");
            assert_eq!(d.decisions[0].remaining, 0, "{kind:?}");
            let retry = d.decisions[0].retry_after.unwrap();
            assert!(retry > 0, "{kind:?}");
            if matches!(kind, AlgorithmKind::TokenBucket | AlgorithmKind::Gcra) {
                assert_eq!(retry, MINUTE, "{kind:?}: one token must refill");
            }

            let d = at(&store, check(&id, &l, key, 1, 3), now).await;
            assert!(d.allowed, "{kind:?}: 6 + 1 leaves 3");
            assert_eq!(
                d.decisions[0].remaining, 0,
                "{kind:?}: 3 left, all reserved"
            );

            let d = at(&store, check(&id, &l, key, 0, 0), now).await;
            assert_eq!(
                d.decisions[0].remaining, 3,
                "{kind:?}: the refusal charged nothing, the admission 1"
            );
            let d = at(&store, check(&id, &l, key, 3, 0), now).await;
            assert!(d.allowed, "{kind:?}: no reserve: the last 3 pass");
            let d = at(&store, check(&id, &l, key, 1, 0), now).await;
            assert!(!d.allowed, "{kind:?}: empty");
        });
    }
}

/// A delay limit's extended bucket (burst 5 + 3) with a reserve of 3 is the
/// plain bucket, on the same key: what fits the burst passes, the rest is
/// refused, and without the reserve the extension is still there.
#[test]
fn an_extended_bucket_with_its_extension_reserved_is_the_plain_bucket() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let key = KeyId(6);
    let now = 2_000_000_000_000_u64;
    for kind in [AlgorithmKind::TokenBucket, AlgorithmKind::Gcra] {
        let plain = limiter(kind, 1, MINUTE, 5, false);
        let extended = limiter(kind, 1, MINUTE, 8, false);
        let id = fresh_id("extended");
        env.rt.block_on(async {
            for i in 0..5 {
                let d = store
                    .check_at(&[check(&id, &extended, key, 1, 3)], now)
                    .await
                    .unwrap();
                assert!(d.allowed, "{kind:?}: {i}");
                assert_eq!(d.decisions[0].limit, 8);
                assert_eq!(d.decisions[0].remaining, 4 - i, "{kind:?}");
            }
            let d = store
                .check_at(&[check(&id, &extended, key, 1, 3)], now)
                .await
                .unwrap();
            assert!(!d.allowed, "{kind:?}: the plain burst is used up");
            let d = store
                .check_at(&[check(&id, &plain, key, 0, 0)], now)
                .await
                .unwrap();
            assert_eq!(d.decisions[0].remaining, 0, "{kind:?}: one state");
            let d = store
                .check_at(&[check(&id, &extended, key, 1, 0)], now)
                .await
                .unwrap();
            assert!(d.allowed, "{kind:?}: the extension is there");
            assert_eq!(d.decisions[0].remaining, 2, "{kind:?}");
        });
    }
}

/// 200 concurrent checks through two stores (two instances) on one key,
/// each leaving 20 of 100: exactly 80 pass. Then checks without a reserve
/// take exactly the other 20.
#[test]
fn a_reserve_holds_exactly_under_concurrency_across_instances() {
    let Some(env) = env() else { return };
    let a = RedisStore::from_connection(env.conn.clone(), None);
    let conn_b = env.rt.block_on(async {
        redis::Client::open(env.server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap()
    });
    let b = RedisStore::from_connection(conn_b, None);
    let l = Arc::new(limiter(AlgorithmKind::Gcra, 1, 3600 * SECOND, 100, false));
    let id = Arc::new(fresh_id("concurrent-reserve"));
    let admitted = |reserve: u64| {
        env.rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..200 {
                let store = if i % 2 == 0 { a.clone() } else { b.clone() };
                let (l, id) = (l.clone(), id.clone());
                tasks.push(tokio::spawn(async move {
                    let c = check(&id, &l, KeyId(9), 1, reserve);
                    store.check(&[c]).await.unwrap().allowed
                }));
            }
            let mut n = 0;
            for t in tasks {
                n += u32::from(t.await.unwrap());
            }
            n
        })
    };
    assert_eq!(admitted(20), 80, "a class capped at 80 %");
    assert_eq!(admitted(0), 20, "the reserve was left for the others");
}

fn spec(burst: u64) -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::TokenBucket,
        rate: Rate::new(1, 3600 * SECOND).unwrap(),
        burst,
        nodelay: false,
    }
}

fn shared_check(counter: &Counter, reserve: u64) -> Check<'_> {
    Check {
        counter,
        key: KeyId(3),
        cost: 1,
        reserve,
        lease: None,
    }
}

/// The shared store on the test's Redis, batched, with a generous timeout
/// (no call may fall back on a busy machine), connected.
async fn connected_shared(env: &common::Env) -> Arc<sluice_redis::SharedStore> {
    let url: StoreUrl = env.server.url().parse().unwrap();
    let shared = sluice_redis::shared(
        url,
        true,
        ProtectOptions {
            timeout: Duration::from_secs(2),
            ..ProtectOptions::default()
        },
    );
    shared.connect(Duration::from_secs(10)).await.unwrap();
    shared
}

/// The over-limit cache remembers a refusal for its reserve only: a request
/// with the same limit, key and cost but no reserve still goes to Redis and
/// passes.
#[test]
fn the_over_limit_cache_tells_reserves_apart() {
    let Some(env) = env() else { return };
    env.rt.block_on(async {
        let shared = connected_shared(&env).await;
        let id = fresh_id("cache-reserve");
        let c = shared.counter(CounterDef::new(&id, spec(4)).unwrap());
        for _ in 0..2 {
            let d = shared.check(&[shared_check(&c, 2)]).await.unwrap();
            assert!(d.allowed);
            assert_eq!(d.by, DecidedBy::Store);
        }
        let d = shared.check(&[shared_check(&c, 2)]).await.unwrap();
        assert!(!d.allowed, "2 used, 1 more would leave 1 < 2");
        let d = shared.check(&[shared_check(&c, 2)]).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.by, DecidedBy::Cache, "the same request is cached");
        for _ in 0..2 {
            let d = shared.check(&[shared_check(&c, 0)]).await.unwrap();
            assert!(d.allowed, "no reserve: not short-circuited");
            assert_eq!(d.by, DecidedBy::Store);
        }
    });
}

/// While Redis is unreachable, the local fallback applies reserves to its
/// share: alone (one instance) the limit itself; with four instances a
/// quarter of what may be used.
#[test]
fn the_local_fallback_keeps_the_reserve_of_its_share() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        for (instances, capped, rest) in [(1, 8, 2), (4, 2, 1)] {
            // Nothing listens on port 1: the fallback decides.
            let shared = sluice_redis::shared(
                "redis://127.0.0.1:1".parse().unwrap(),
                true,
                ProtectOptions {
                    fallback: Fallback::Local,
                    expected_instances: instances,
                    ..ProtectOptions::default()
                },
            );
            let id = fresh_id("fallback-reserve");
            let c = shared.counter(CounterDef::new(&id, spec(10)).unwrap());
            let count = |reserve: u64| {
                let (shared, c) = (shared.clone(), c.clone());
                async move {
                    let mut n = 0;
                    for _ in 0..20 {
                        let d = shared.check(&[shared_check(&c, reserve)]).await.unwrap();
                        assert_eq!(d.by, DecidedBy::Fallback(Fallback::Local));
                        n += u32::from(d.allowed);
                    }
                    n
                }
            };
            assert_eq!(count(2).await, capped, "{instances} instances: capped");
            assert_eq!(count(0).await, rest, "{instances} instances: the rest");
        }
    });
}

/// A cost that, with its reserve, can never fit is the error the memory
/// store gives (`StoreError::Impossible`), not a refusal with a retry time
/// of u64::MAX nanoseconds (which a server would have shown as a
/// Retry-After of centuries); nothing is charged, and the store is not
/// counted as failing.
#[test]
fn a_cost_that_can_never_fit_is_the_memory_store_s_error() {
    use sluice_store::seam::StoreError;
    use sluice_store::{MemoryStore, MemoryStoreConfig};
    let Some(env) = env() else { return };
    env.rt.block_on(async {
        let shared = connected_shared(&env).await;
        let memory = MemoryStore::new(MemoryStoreConfig::default());
        let id = fresh_id("never-fits");
        let def = CounterDef::new(&id, spec(4)).unwrap();
        let (on_redis, in_memory) = (shared.counter(def.clone()), memory.counter(def));
        // 5 of a burst of 4: a cost of 5, or of 3 with 2 kept back.
        for (cost, reserve) in [(5, 0), (3, 2)] {
            let never = |c| Check {
                reserve,
                cost,
                ..shared_check(c, 0)
            };
            let redis_says = shared.check(&[never(&on_redis)]).await;
            let memory_says = Store::check(&memory, &[never(&in_memory)]).await;
            assert_eq!(
                memory_says,
                Err(StoreError::Impossible {
                    cost: 5,
                    capacity: 4
                })
            );
            assert_eq!(redis_says, memory_says, "cost {cost}, reserve {reserve}");
        }
        let d = shared.check(&[shared_check(&on_redis, 0)]).await.unwrap();
        assert_eq!(
            (d.by, d.decisions[0].remaining),
            (DecidedBy::Store, 3),
            "nothing was charged"
        );
    });
}
