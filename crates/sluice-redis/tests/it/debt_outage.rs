//! Debits through the protection, on a real Redis: while Redis is up, a
//! debit is Redis's; while it is down, the local fallback's share takes
//! it (and refuses the key while in debt), and the ledger owes it to
//! Redis, which is charged the debit when it is back: the key is in debt
//! there too.

use std::time::{Duration, Instant};

use sluice_core::{AlgorithmKind, Debited, LimitSpec, Rate};
use sluice_protect::ProtectOptions;
use sluice_redis::{RedisCheck, StoreUrl};
use sluice_store::KeyId;
use sluice_store::seam::{Check, CounterDef, DecidedBy, Fallback, Store};
use sluice_testkit::RedisServer;

#[test]
fn a_debit_in_an_outage_lands_locally_and_is_charged_to_redis_on_recovery() {
    if !sluice_testkit::require_redis() {
        return;
    }
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url: StoreUrl = server.url().parse().unwrap();
    let shared = rt.block_on(async {
        let shared = sluice_redis::shared(
            url,
            false,
            ProtectOptions {
                timeout: Duration::from_millis(300),
                fallback: Fallback::Local,
                breaker_open: Duration::from_millis(100),
                over_limit_cache: false,
                ..ProtectOptions::default()
            },
        );
        shared.connect(Duration::from_secs(20)).await.unwrap();
        shared
    });
    // Five an hour: nothing is paid off while the test runs.
    let spec = LimitSpec {
        algorithm: AlgorithmKind::TokenBucket,
        rate: Rate::new(5, 3_600_000_000_000).unwrap(),
        burst: 5,
        nodelay: true,
    };
    let counter = shared.counter(CounterDef::new("debt-outage", spec).unwrap());
    let (up, down) = (KeyId(0xa1), KeyId(0xb2));
    let check = |key, cost| {
        let checks = [Check {
            counter: &counter,
            key,
            cost,
            reserve: 0,
            lease: None,
        }];
        rt.block_on(shared.check(&checks)).unwrap()
    };
    let debit = |key, amount, max_debt| rt.block_on(shared.debit(&counter, key, amount, max_debt));

    // Redis up: Redis takes the debit.
    assert_eq!(
        debit(up, 7, 4),
        Ok(Debited {
            charged: 7,
            excess: 0
        })
    );
    let refused = check(up, 0);
    assert!(!refused.allowed, "in debt on redis: {refused:?}");
    assert_eq!(refused.by, DecidedBy::Store);

    // Redis down: the local share takes it, and refuses the key.
    server.kill();
    assert_eq!(
        debit(down, 9, 3),
        Ok(Debited {
            charged: 8,
            excess: 1
        }),
        "5 left and 3 of debt on the local share"
    );
    let local = check(down, 0);
    assert!(!local.allowed, "in debt locally: {local:?}");
    assert_eq!(local.by, DecidedBy::Fallback(Fallback::Local));
    assert_eq!(shared.remote_health().unwrap().owed_pairs, 1);

    // Redis back (empty): the debit owed is charged there, as a debit,
    // before Redis decides for the key again.
    server.restart();
    let started = Instant::now();
    let back = loop {
        let c = check(down, 0);
        if c.by == DecidedBy::Store {
            break c;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "redis never came back"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!back.allowed, "in debt on redis after recovery: {back:?}");
    let health = shared.remote_health().unwrap();
    assert_eq!(health.owed_pairs, 0);
    // All 9 owed, of which Redis, empty, charges 8 (5 left and 3 of debt,
    // its max_debt) and logs the excess.
    assert_eq!(health.owed_settled, 8, "{health:?}");
    // Redis itself holds the debt.
    let store = shared.remote().store().unwrap();
    let limiter = spec.build().unwrap();
    let direct = RedisCheck {
        limit_id: counter.def().id(),
        limiter: &limiter,
        key: down,
        cost: 0,
        reserve: 0,
    };
    let peek = rt.block_on(store.check(&[direct])).unwrap();
    assert!(!peek.allowed);
    let paid_off_in = peek.decisions[0].reset_after;
    // 8 units at 5 an hour: 8 × 12 min.
    assert!(
        paid_off_in > 8 * 12 * 60 * 1_000_000_000 - 60_000_000_000,
        "{paid_off_in} ns"
    );
}
