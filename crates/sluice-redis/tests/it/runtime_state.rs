//! Runtime plans and credits in Redis: writes bump versions, a watcher
//! reloads only what changed, and concurrent spends never overdraw.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice_protect::Remote;
use sluice_redis::runtime_state::{CREDITS_KEY, PLANS_KEY, Seen, poll_once};
use sluice_redis::{RedisRemote, RuntimeSink, RuntimeState, StoreUrl};
use sluice_store::KeyId;
use sluice_testkit::{RedisServer, require_redis};

async fn state_on(redis: &RedisServer) -> RuntimeState {
    let url: StoreUrl = redis.url().parse().unwrap();
    let remote = RedisRemote::new(url, true);
    remote.connect(Duration::from_secs(5)).await.unwrap();
    RuntimeState::new(remote)
}

#[derive(Default)]
struct Loads {
    plans: Mutex<Vec<HashMap<KeyId, String>>>,
    credits: Mutex<Vec<HashMap<KeyId, u64>>>,
}

impl RuntimeSink for Loads {
    fn plans_loaded(&self, plans: HashMap<KeyId, String>) {
        self.plans.lock().unwrap().push(plans);
    }
    fn credits_loaded(&self, credits: HashMap<KeyId, u64>) {
        self.credits.lock().unwrap().push(credits);
    }
}

#[tokio::test]
async fn a_poll_reloads_only_the_hash_that_changed() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let state = state_on(&redis).await;
    let loads = Loads::default();
    let mut seen = Seen::default();
    let alice = KeyId(0xa11ce);

    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert_eq!(
        loads.plans.lock().unwrap().len(),
        1,
        "first poll loads both"
    );
    assert_eq!(loads.credits.lock().unwrap().len(), 1);
    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert_eq!(loads.plans.lock().unwrap().len(), 1, "nothing changed");

    state.set_plan(alice, "pro").await.unwrap();
    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert_eq!(
        loads.plans.lock().unwrap().last().unwrap(),
        &HashMap::from([(alice, "pro".to_owned())])
    );
    assert_eq!(loads.credits.lock().unwrap().len(), 1, "credits unchanged");

    // Writing what is already there changes no version.
    state.set_plan(alice, "pro").await.unwrap();
    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert_eq!(loads.plans.lock().unwrap().len(), 2);

    state.set_credits(alice, 7).await.unwrap();
    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert_eq!(
        loads.credits.lock().unwrap().last().unwrap(),
        &HashMap::from([(alice, 7)])
    );

    assert!(state.remove_plan(alice).await.unwrap());
    assert!(!state.remove_plan(alice).await.unwrap());
    state.set_credits(alice, 0).await.unwrap();
    poll_once(&state, &loads, &mut seen).await.unwrap();
    assert!(loads.plans.lock().unwrap().last().unwrap().is_empty());
    assert!(loads.credits.lock().unwrap().last().unwrap().is_empty());
    let plans = redis.command(&["HLEN", PLANS_KEY]).unwrap();
    assert_eq!(plans.trim(), ":0");
    let credits = redis.command(&["EXISTS", CREDITS_KEY]).unwrap();
    assert_eq!(credits.trim(), ":0", "an emptied balance leaves no field");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_spends_never_overdraw() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    // Two "instances": two stores on one Redis.
    let (a, b) = (state_on(&redis).await, state_on(&redis).await);
    let key = KeyId(42);
    a.set_credits(key, 20).await.unwrap();
    let spent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..60 {
        let s = if i % 2 == 0 { a.clone() } else { b.clone() };
        let spent = spent.clone();
        tasks.push(tokio::spawn(async move {
            let cost = 1 + (i % 3);
            if let Some(_left) = s
                .spend_credits(key, cost, Duration::from_secs(5))
                .await
                .unwrap()
            {
                spent.fetch_add(cost, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let left = a.credits(key).await.unwrap();
    let spent = spent.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        spent + left,
        20,
        "every credit spent once: {spent} + {left}"
    );
    assert!(left < 3, "spends stopped only when none could pass: {left}");

    assert_eq!(
        b.spend_credits(key, 50, Duration::from_secs(5))
            .await
            .unwrap(),
        None
    );
    b.refund_credits(key, 5).await.unwrap();
    assert_eq!(a.credits(key).await.unwrap(), left + 5);
}

#[tokio::test]
async fn fields_are_key_ids_never_raw_keys() {
    if !require_redis() {
        return;
    }
    let redis = RedisServer::start();
    let state = state_on(&redis).await;
    let id = sluice_store::KeyHasher::from_secret(b"s").key_id("alice");
    state.set_plan(id, "pro").await.unwrap();
    let all = redis.command(&["HGETALL", PLANS_KEY]).unwrap();
    assert!(all.contains(&id.to_hex()), "{all}");
    assert!(!all.contains("alice"), "{all}");
}
