//! The Redis store on Redis's own clock: all-or-nothing, TTLs, key names,
//! script reloads, impossible costs, duplicates and batching.

#![allow(clippy::unwrap_used)]

use crate::common;

use redis::AsyncCommands;
use sluice_core::{AlgorithmKind, Limiter};
use sluice_redis::{BatchConfig, RedisCheck, RedisStore, RedisStoreError, key_name};
use sluice_store::{KeyHasher, KeyId};

use common::{KINDS, env, fresh_id, limiter};

const SECOND: u64 = 1_000_000_000;

fn check<'a>(id: &'a str, limiter: &'a Limiter, key: KeyId, cost: u64) -> RedisCheck<'a> {
    RedisCheck {
        limit_id: id,
        limiter,
        key,
        cost,
        reserve: 0,
    }
}

/// The store on one connection, as a single node decides (`false`), and
/// as Redis Cluster does, each hash tag on its own (`true`).
fn both_backends(conn: &redis::aio::MultiplexedConnection) -> [(bool, RedisStore); 2] {
    [
        (false, RedisStore::from_connection(conn.clone(), None)),
        (true, RedisStore::from_connection_per_tag(conn.clone())),
    ]
}

#[test]
fn a_refused_request_charges_nothing() {
    let Some(env) = env() else { return };
    for (per_tag, store) in both_backends(&env.conn) {
        let roomy = limiter(AlgorithmKind::TokenBucket, 1, 60 * SECOND, 10, false);
        let tight = limiter(AlgorithmKind::FixedWindow, 1, 60 * SECOND, 1, false);
        let (a, b) = (fresh_id("roomy"), fresh_id("tight"));
        // The tight limit is on another client key: another hash tag.
        let (k1, k2) = (KeyId(11), KeyId(22));
        env.rt.block_on(async {
            let both = [check(&a, &roomy, k1, 3), check(&b, &tight, k2, 1)];
            let first = store.check(&both).await.unwrap();
            assert!(first.allowed);
            assert_eq!(first.decisions[0].remaining, 7);
            let second = store.check(&both).await.unwrap();
            assert!(!second.allowed);
            // The roomy limit reports its state as it stands: still 7.
            assert!(second.decisions[0].allowed);
            assert_eq!(second.decisions[0].remaining, 7);
            assert!(!second.decisions[1].allowed);
            let peek = store.check(&[check(&a, &roomy, k1, 0)]).await.unwrap();
            assert_eq!(peek.decisions[0].remaining, 7, "per_tag {per_tag}");
        });
    }
}

#[test]
fn every_written_key_expires_when_its_limit_is_full_again() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let key = KeyId(7);
    for kind in KINDS {
        // 10/s, burst 10: windows of one second; a cost of 1 drains in 100 ms.
        let l = limiter(kind, 10, SECOND, 10, false);
        let id = fresh_id("ttl");
        let d = env
            .rt
            .block_on(store.check(&[check(&id, &l, key, 1)]))
            .unwrap();
        assert!(d.allowed);
        let mut conn = env.conn.clone();
        let pttl: i64 = env.rt.block_on(conn.pttl(key_name(&id, key))).unwrap();
        // The key lives at least until idle_at and at most twice as long
        // (a TTL is refreshed only when it falls short), in whole ms.
        let idle_ms = d.decisions[0].reset_after.div_ceil(1_000_000) as i64;
        assert!(pttl > 0, "{kind:?}: no TTL ({pttl})");
        assert!(
            pttl <= 2 * idle_ms + 1,
            "{kind:?}: {pttl} ms > 2 x {idle_ms} ms"
        );
        // A second charge that the expiry already covers rewrites a string
        // state in place: the key keeps its TTL. A sliding log lives one
        // window past its newest entry, so each admission renews it.
        let again = env
            .rt
            .block_on(store.check(&[check(&id, &l, key, 1)]))
            .unwrap();
        assert!(again.allowed);
        assert_eq!(again.decisions[0].remaining, 8, "{kind:?}");
        let kept: i64 = env.rt.block_on(conn.pttl(key_name(&id, key))).unwrap();
        let most = if kind == AlgorithmKind::SlidingLog {
            2 * again.decisions[0].reset_after.div_ceil(1_000_000) as i64 + 1
        } else {
            pttl
        };
        assert!(
            kept > 0 && kept <= most,
            "{kind:?}: {kept} ms after {pttl} ms (at most {most})"
        );
    }
}

#[test]
fn key_names_hold_the_key_id_never_the_raw_key() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let raw = "alice-super-secret-api-key";
    let key = KeyHasher::from_secret(b"test").key_id(raw);
    let limiters: Vec<Limiter> = KINDS
        .iter()
        .map(|k| limiter(*k, 10, SECOND, 10, false))
        .collect();
    let ids: Vec<String> = (0..KINDS.len()).map(|_| fresh_id(raw)).collect();
    let checks: Vec<RedisCheck<'_>> = ids
        .iter()
        .zip(&limiters)
        .map(|(id, l)| check(id, l, key, 1))
        .collect();
    env.rt.block_on(store.check(&checks)).unwrap();
    let mut conn = env.conn.clone();
    let keys: Vec<String> = env.rt.block_on(conn.keys("*")).unwrap();
    assert_eq!(keys.len(), KINDS.len());
    let prefix = format!("sluice:{{{}}}:", key.to_hex());
    for k in keys {
        assert!(k.starts_with(&prefix), "{k}");
        let tag = &k[prefix.len()..];
        assert_eq!(tag.len(), 16, "{k}");
        assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()), "{k}");
        assert!(!k.contains("alice") && !k.contains("secret"), "{k}");
    }
}

#[test]
fn a_flushed_script_is_loaded_again() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let l = limiter(AlgorithmKind::Gcra, 1, 60 * SECOND, 5, false);
    let id = fresh_id("flush");
    let mut conn = env.conn.clone();
    env.rt.block_on(async {
        assert!(
            store
                .check(&[check(&id, &l, KeyId(1), 1)])
                .await
                .unwrap()
                .allowed
        );
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        let d = store.check(&[check(&id, &l, KeyId(1), 1)]).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.decisions[0].remaining, 3);
    });
}

#[test]
fn a_cost_above_capacity_is_an_error_and_changes_nothing() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let small = limiter(AlgorithmKind::TokenBucket, 1, SECOND, 3, false);
    let big = limiter(AlgorithmKind::SlidingLog, 1, SECOND, 30, false);
    let (a, b) = (fresh_id("small"), fresh_id("big"));
    let mut conn = env.conn.clone();
    env.rt.block_on(async {
        let err = store
            .check(&[check(&b, &big, KeyId(1), 5), check(&a, &small, KeyId(1), 4)])
            .await
            .unwrap_err();
        assert!(matches!(err, RedisStoreError::Check(_)), "{err}");
        let err = store
            .check(&[check(&a, &small, KeyId(1), 4)])
            .await
            .unwrap_err();
        assert!(matches!(err, RedisStoreError::Check(_)), "{err}");
        // Two checks of 2 on one (limit, key) are one check of 4.
        let err = store
            .check(&[
                check(&a, &small, KeyId(1), 2),
                check(&a, &small, KeyId(1), 2),
            ])
            .await
            .unwrap_err();
        assert!(matches!(err, RedisStoreError::Check(_)), "{err}");
        let size: u64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
        assert_eq!(size, 0);
    });
}

/// A refund over several client keys (hash tags), on one node and as in
/// Redis Cluster (each tag on its own): every key gets its cost back,
/// duplicates merged and capped at the burst; no refund at all is an
/// empty answer.
#[test]
fn a_refund_over_several_keys_reaches_each_of_them() {
    let Some(env) = env() else { return };
    for (per_tag, store) in both_backends(&env.conn) {
        let l = limiter(AlgorithmKind::TokenBucket, 1, 60 * SECOND, 5, false);
        let id = fresh_id("refund-keys");
        let (k1, k2) = (KeyId(31), KeyId(32));
        env.rt.block_on(async {
            for k in [k1, k2] {
                assert!(store.check(&[check(&id, &l, k, 5)]).await.unwrap().allowed);
            }
            let back = [
                check(&id, &l, k1, 2),
                check(&id, &l, k2, 4),
                check(&id, &l, k2, 4),
            ];
            let given = store.refund(&back).await.unwrap();
            assert!(given.allowed);
            let remaining: Vec<u64> = given.decisions.iter().map(|d| d.remaining).collect();
            assert_eq!(remaining, [2, 5, 5], "per_tag {per_tag}");
            let peek = store.check(&[check(&id, &l, k1, 0)]).await.unwrap();
            assert_eq!(peek.decisions[0].remaining, 2, "per_tag {per_tag}");
            let none = store.refund(&[]).await.unwrap();
            assert!(none.allowed && none.decisions.is_empty());
        });
    }
}

#[test]
fn duplicate_checks_are_merged() {
    let Some(env) = env() else { return };
    let store = RedisStore::from_connection(env.conn.clone(), None);
    let l = limiter(AlgorithmKind::SlidingWindow, 1, 60 * SECOND, 3, false);
    let id = fresh_id("dup");
    env.rt.block_on(async {
        let twice = [check(&id, &l, KeyId(1), 1), check(&id, &l, KeyId(1), 1)];
        let d = store.check(&twice).await.unwrap();
        assert!(d.allowed);
        assert_eq!(d.decisions[0], d.decisions[1]);
        assert_eq!(d.decisions[0].remaining, 1);
        let d = store.check(&twice).await.unwrap();
        assert!(!d.allowed);
        assert_eq!(d.decisions[0].remaining, 1);
    });
}

#[test]
fn concurrent_requests_admit_exactly_the_burst_batched_or_not() {
    let Some(env) = env() else { return };
    for batching in [None, Some(BatchConfig::default())] {
        let store = RedisStore::from_connection(env.conn.clone(), batching);
        let l = limiter(AlgorithmKind::Gcra, 1, 60 * SECOND, 50, false);
        let other = limiter(AlgorithmKind::SlidingLog, 1, 60 * SECOND, 40, false);
        let (id, id2) = (fresh_id("race"), fresh_id("race2"));
        let allowed = env.rt.block_on(async {
            let mut tasks = Vec::new();
            for i in 0..300u64 {
                let (store, l, other, id, id2) = (store.clone(), l, other, id.clone(), id2.clone());
                tasks.push(tokio::spawn(async move {
                    // Half the requests also meet a second limit on the key.
                    let mut checks = vec![check(&id, &l, KeyId(5), 1)];
                    if i % 2 == 0 {
                        checks.push(check(&id2, &other, KeyId(5), 1));
                    }
                    store.check(&checks).await.unwrap().allowed
                }));
            }
            let mut n = 0;
            for t in tasks {
                n += u32::from(t.await.unwrap());
            }
            n
        });
        assert_eq!(allowed, 50, "batching {batching:?}");
    }
}
