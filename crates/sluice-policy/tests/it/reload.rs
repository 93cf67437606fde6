//! What a reload keeps of a limit's counts: an unchanged limit keeps them,
//! a changed one starts fresh, and so does one a second reload brings back.

use crate::DecideHere;
use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::ManualClock;
use sluice_policy::{Engine, Policy, RequestInfo};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

const ONE: &str = "[[limits]]\nname = \"per-ip\"\nkey = \"ip\"\nrate = \"1/min\"\nburst = 1\n";

fn policy(toml: &str) -> Policy {
    Policy::from_toml("reload.toml", toml).unwrap()
}

/// One request of the client these tests use.
fn decide(e: &Engine<ManualClock>) -> sluice_policy::Verdict {
    e.decide_here(&RequestInfo {
        method: &Method::GET,
        path: "/",
        headers: &HeaderMap::new(),
        peer: Some("192.0.2.1".parse().unwrap()),
        cost: None,
        body: None,
    })
    .unwrap()
}

fn allowed(e: &Engine<ManualClock>) -> bool {
    decide(e).allowed
}

#[test]
fn a_limit_changed_and_changed_back_starts_fresh() {
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    let e = Engine::with_store(policy(ONE), Arc::new(store), KeyHasher::random());
    assert!(allowed(&e));
    assert!(!allowed(&e), "the burst of one is spent");
    // The same limit: the same counts.
    e.replace_policy(policy(ONE));
    assert!(!allowed(&e));
    // Changed, then back with no request in between: each time a new limit.
    e.replace_policy(policy(&ONE.replace("1/min", "2/min")));
    e.replace_policy(policy(ONE));
    assert!(allowed(&e), "the limit brought back starts fresh");
    assert!(!allowed(&e));
}

#[test]
fn a_limit_brought_back_starts_fresh_while_another_thread_holds_the_old_policy() {
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    let e = Arc::new(Engine::with_store(
        policy(ONE),
        Arc::new(store),
        KeyHasher::random(),
    ));
    assert!(allowed(&e));
    // Another thread decides on the first policy, then waits: its copy of
    // that policy lives on while the policy is replaced twice.
    let (decided, go_on) = (
        std::sync::mpsc::channel::<()>(),
        std::sync::mpsc::channel::<()>(),
    );
    let other = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || {
            assert!(!allowed(&e), "the burst of one is spent");
            decided.0.send(()).unwrap();
            go_on.1.recv().unwrap();
            // Its next decision reads the policy in force now.
            allowed(&e)
        })
    };
    decided.1.recv().unwrap();
    e.replace_policy(policy(&ONE.replace("1/min", "2/min")));
    e.replace_policy(policy(ONE));
    assert!(allowed(&e), "the limit brought back starts fresh");
    go_on.0.send(()).unwrap();
    assert!(
        !other.join().unwrap(),
        "the other thread decides on the new counts"
    );
}

#[test]
fn engines_deciding_on_one_thread_each_keep_their_own_policy() {
    let engine = |toml: &str| {
        let store =
            MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
        Engine::with_store(policy(toml), Arc::new(store), KeyHasher::random())
    };
    let (one, three) = (engine(ONE), engine(&ONE.replace("burst = 1", "burst = 3")));
    let mut admitted = (0, 0);
    for _ in 0..5 {
        admitted.0 += usize::from(allowed(&one));
        admitted.1 += usize::from(allowed(&three));
    }
    assert_eq!(admitted, (1, 3));
    // A reload of one is seen by it, on this thread, at once.
    one.replace_policy(policy(&ONE.replace("burst = 1", "burst = 2")));
    let again = (0..5).filter(|_| allowed(&one)).count();
    assert_eq!(again, 2, "a changed limit starts fresh, with its new burst");
}

#[test]
fn engines_on_one_store_share_a_limit_both_add_on_reload() {
    let store = Arc::new(MemoryStore::with_clock(
        MemoryStoreConfig::default(),
        ManualClock::new(1 << 50),
    ));
    let hasher = KeyHasher::random();
    let other = "[[limits]]\nname = \"other\"\nkey = \"ip\"\nrate = \"9/min\"\nburst = 9\n";
    let a = Engine::with_store(policy(other), Arc::clone(&store), hasher.clone());
    let b = Engine::with_store(policy(other), Arc::clone(&store), hasher);
    // Both add the same limit: one state on the store, as at start.
    let both = format!("{other}{ONE}");
    a.replace_policy(policy(&both));
    b.replace_policy(policy(&both));
    assert!(allowed(&a));
    assert!(!allowed(&b), "the burst of one is spent, on either engine");
}

#[test]
fn decisions_on_many_threads_during_reloads_each_read_one_policy() {
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    let named = |name: &str| {
        ONE.replace("per-ip", name)
            .replace("burst = 1", "burst = 1000000")
    };
    let e = Arc::new(Engine::with_store(
        policy(&named("first")),
        Arc::new(store),
        KeyHasher::random(),
    ));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (e, stop) = (Arc::clone(&e), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut seen = std::collections::BTreeSet::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let v = decide(&e);
                    // One limit, of one policy or the other: never a mix.
                    assert_eq!(v.results.len(), 1);
                    seen.insert(v.results[0].name().to_owned());
                }
                seen
            })
        })
        .collect();
    for i in 0..200 {
        let name = if i % 2 == 0 { "second" } else { "first" };
        e.replace_policy(policy(&named(name)));
        // Once the reload returns, this thread decides on the new policy.
        let v = decide(&e);
        assert_eq!(v.results[0].name(), name);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        let seen = r.join().unwrap();
        assert!(
            seen.iter().all(|n| n == "first" || n == "second"),
            "{seen:?}"
        );
    }
}
