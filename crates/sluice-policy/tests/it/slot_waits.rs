//! Concurrency limits with `on_limit = "delay"`: a request that finds
//! every slot held waits for one (up to `max_delay`, at most `max_queue`
//! waiting), is admitted when a slot is given back, and is refused when
//! its wait is over. Through the engine on the memory store, on real time
//! (a wait is real time).

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};
use sluice_policy::settlement::Observed;
use sluice_policy::{Engine, Policy, RequestInfo, Reservation, Verdict};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

fn engine(wait: &str) -> Arc<Engine> {
    let toml = format!(
        "[[limits]]\nname = \"exports\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"concurrency\"\nmax_in_flight = 1\n{wait}\n"
    );
    let policy = Policy::from_toml("slots.toml", &toml).unwrap();
    let store = MemoryStore::new(MemoryStoreConfig::default());
    Arc::new(Engine::with_store(
        policy,
        Arc::new(store),
        KeyHasher::from_secret(b"slots"),
    ))
}

async fn decide(e: &Engine) -> (Verdict, Option<Reservation>) {
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", "k1".parse().unwrap());
    e.decide_reserving(&RequestInfo {
        method: &Method::GET,
        path: "/export",
        headers: &headers,
        peer: None,
        cost: None,
        body: None,
    })
    .await
    .unwrap()
}

async fn release(e: &Engine, r: &Reservation) {
    let done = e.settle(r, &Observed::default()).await;
    assert_eq!(done[0].refunded, 1, "the slot is given back");
}

#[tokio::test]
async fn a_waiting_request_takes_the_slot_given_back() {
    let e = engine("on_limit = \"delay\"\nmax_delay = \"30s\"");
    let (v, held) = decide(&e).await;
    assert!(v.allowed);
    let waiting = tokio::spawn({
        let e = e.clone();
        async move { decide(&e).await }
    });
    // Still waiting while the slot is held.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "waits for the slot");
    release(&e, &held.unwrap()).await;
    let (v, r) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("admitted once the slot came back, long before max_delay")
        .unwrap();
    assert!(v.allowed);
    assert!(r.is_some(), "it holds the slot now");
}

#[tokio::test]
async fn a_wait_ends_in_a_refusal_at_max_delay() {
    let e = engine("on_limit = \"delay\"\nmax_delay = \"150ms\"");
    let (_, held) = decide(&e).await;
    let (v, r) = decide(&e).await;
    assert!(!v.allowed, "no slot came back within max_delay");
    assert!(r.is_none());
    assert_eq!(v.violated().next().unwrap().name(), "exports");
    drop(held);
}

#[tokio::test]
async fn a_full_waiting_room_refuses_at_once_and_no_delay_refuses_at_once() {
    let e = engine("on_limit = \"delay\"\nmax_delay = \"30s\"\nmax_queue = 1");
    let (_, held) = decide(&e).await;
    let first = tokio::spawn({
        let e = e.clone();
        async move { decide(&e).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!first.is_finished(), "the one place is taken");
    let (v, _) = tokio::time::timeout(Duration::from_secs(5), decide(&e))
        .await
        .expect("refused at once: the room is full");
    assert!(!v.allowed);
    release(&e, &held.unwrap()).await;
    let (v, _) = tokio::time::timeout(Duration::from_secs(10), first)
        .await
        .unwrap()
        .unwrap();
    assert!(v.allowed);

    let plain = engine("");
    let (_, _held) = decide(&plain).await;
    let (v, _) = tokio::time::timeout(Duration::from_secs(5), decide(&plain))
        .await
        .expect("without on_limit = \"delay\", refused at once");
    assert!(!v.allowed);
}

#[test]
fn a_wait_needs_max_delay_and_a_queue_of_one_at_least() {
    for (wait, says) in [
        ("on_limit = \"delay\"", "needs max_delay"),
        (
            "on_limit = \"delay\"\nmax_delay = \"1s\"\nmax_queue = 0",
            "max_queue must be at least 1",
        ),
        (
            "on_limit = \"delay\"\nmax_delay = \"soon\"",
            "max_delay `soon`",
        ),
    ] {
        let toml = format!(
            "[[limits]]\nname = \"exports\"\nkey = \"ip\"\nalgorithm = \"concurrency\"\nmax_in_flight = 1\n{wait}\n"
        );
        let err = Policy::from_toml("slots.toml", &toml)
            .unwrap_err()
            .to_string();
        assert!(err.contains(says), "{wait}: {err}");
        assert!(err.contains("slots.toml:"), "{err}");
    }
}
