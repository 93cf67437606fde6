//! A limit's script parameters, computed once, when its counter is
//! registered with the shared store: requests read them from the counter's
//! slot. A limit they cannot be computed for is refused with the error it
//! always was, on either path; a counter of another store is refused.

#![allow(clippy::unwrap_used)]

use crate::common;

use std::time::Duration;

use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_protect::{Remote, RemoteError};
use sluice_redis::{RedisCheck, RedisRemote, RedisStore, RedisStoreError, StoreUrl};
use sluice_store::KeyId;
use sluice_store::seam::{Check, Counter, CounterDef, Slot, StoreError};

use common::{env, fresh_id};

/// 2^60 a nanosecond: a microsecond is 1000 · 2^60 units, beyond the
/// script's 64-bit parameters.
fn unreadable() -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::TokenBucket,
        rate: Rate::new(1 << 60, 1).unwrap(),
        burst: 1,
        nodelay: false,
    }
}

fn plain() -> LimitSpec {
    LimitSpec {
        algorithm: AlgorithmKind::Gcra,
        rate: Rate::per_second(1),
        burst: 3,
        nodelay: false,
    }
}

fn seam_check(counter: &Counter) -> Check<'_> {
    Check {
        counter,
        key: KeyId(7),
        cost: 1,
        reserve: 0,
        lease: None,
    }
}

/// The store's error for a limit whose parameters cannot be read.
fn unreadable_error(id: &str) -> String {
    format!("cannot read the parameters of limit `{id}`")
}

#[test]
fn a_limit_without_parameters_is_refused_with_its_error_on_both_paths() {
    let Some(env) = env() else { return };
    env.rt.block_on(async {
        let id = fresh_id("unreadable");
        let limiter = unreadable().build().unwrap();
        let store = RedisStore::from_connection(env.conn.clone(), None);
        let raw = RedisCheck {
            limit_id: &id,
            limiter: &limiter,
            key: KeyId(7),
            cost: 1,
            reserve: 0,
        };
        for result in [store.check(&[raw]).await, store.refund(&[raw]).await] {
            match result {
                Err(RedisStoreError::BadReply(m)) => assert_eq!(m, unreadable_error(&id)),
                other => panic!("expected the parameters' error, got {other:?}"),
            }
        }

        let url: StoreUrl = env.server.url().parse().unwrap();
        let remote = RedisRemote::new(url, true);
        remote.connect(Duration::from_secs(10)).await.unwrap();
        let def = CounterDef::new(&id, unreadable()).unwrap();
        let counter = Counter::new(def.clone(), remote.slot(&def));
        let expected = RedisStoreError::BadReply(unreadable_error(&id)).to_string();
        for result in [
            remote.try_check(&[seam_check(&counter)]).await,
            remote.try_refund(&[seam_check(&counter)]).await,
        ] {
            match result {
                Err(RemoteError::Failed(m)) => assert_eq!(m, expected),
                other => panic!("expected the parameters' error, got {other:?}"),
            }
        }
    });
}

#[test]
fn a_registered_counter_is_decided_on_its_slot_a_foreign_one_refused() {
    let Some(env) = env() else { return };
    env.rt.block_on(async {
        let url: StoreUrl = env.server.url().parse().unwrap();
        let remote = RedisRemote::new(url, true);
        remote.connect(Duration::from_secs(10)).await.unwrap();
        let id = fresh_id("registered");
        let def = CounterDef::new(&id, plain()).unwrap();
        let counter = Counter::new(def.clone(), remote.slot(&def));
        let remaining: Vec<(bool, u64)> = {
            let mut out = Vec::new();
            for _ in 0..4 {
                let c = remote.try_check(&[seam_check(&counter)]).await.unwrap();
                out.push((c.allowed, c.decisions[0].remaining));
            }
            out
        };
        assert_eq!(
            remaining,
            [(true, 2), (true, 1), (true, 0), (false, 0)],
            "a burst of 3"
        );
        let back = remote.try_refund(&[seam_check(&counter)]).await.unwrap();
        assert_eq!(back.decisions[0].remaining, 1);

        let foreign = Counter::new(def, Slot::empty());
        match remote.try_check(&[seam_check(&foreign)]).await {
            Err(RemoteError::Refused(StoreError::ForeignCounter(name))) => assert_eq!(name, id),
            other => panic!("expected a foreign counter's error, got {other:?}"),
        }
    });
}
