//! Costs settled after the response, through the engine on the memory
//! store with a manual clock: estimates from the limit's cost or a
//! request header, refunds of what was not used, debits into debt that
//! refuse the key's next requests until the rate has paid it off, the debt
//! bound, and status rules.

use std::sync::Arc;

use http::{HeaderMap, Method};
use sluice_core::{Clock, ManualClock};
use sluice_policy::settlement::Observed;
use sluice_policy::{Engine, Policy, RequestInfo, Reservation, Verdict};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

use crate::now;

const SECOND: u64 = 1_000_000_000;

fn engine(settle: &str) -> Engine<ManualClock> {
    let toml = format!(
        "[[limits]]\nname = \"tokens\"\nkey = \"header:X-Api-Key\"\nrate = \"100/s\"\nburst = 100\ncost = 10\nsettle = {settle}\n"
    );
    let policy = Policy::from_toml("settle.toml", &toml).unwrap();
    let store = MemoryStore::with_clock(MemoryStoreConfig::default(), ManualClock::new(1 << 50));
    Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"settle"))
}

fn decide(
    e: &Engine<ManualClock>,
    extra: &[(&'static str, &str)],
) -> (Verdict, Option<Reservation>) {
    let mut headers = client_k1();
    for (name, value) in extra {
        headers.insert(*name, value.parse().unwrap());
    }
    now(e.decide_reserving(&completion(&headers))).unwrap()
}

/// The header fields of client `k1`.
fn client_k1() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("x-api-key", "k1".parse().unwrap());
    headers
}

/// A `POST /v1/chat/completions` with `headers`.
fn completion(headers: &HeaderMap) -> RequestInfo<'_> {
    RequestInfo {
        method: &Method::POST,
        path: "/v1/chat/completions",
        headers,
        peer: None,
        cost: None,
        body: None,
    }
}

fn reported(cost: u64) -> Observed<'static> {
    Observed {
        status: Some(200),
        reported: Some(cost),
        ..Observed::default()
    }
}

#[test]
fn a_policy_without_settle_rules_reserves_nothing() {
    let policy = Policy::from_toml(
        "plain.toml",
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\n",
    )
    .unwrap();
    assert!(!policy.settles());
    let e = engine("{}");
    assert!(e.settles());
}

/// `decide_now` (the tower layer's call, and where `decide_reserving`
/// starts) returns no reservation: under a policy that settles, it
/// declines, and `decide_reserving` decides with one. It used to decide,
/// charging the estimate with nothing to settle it, when the layer asked
/// as a reload brought such a policy in.
#[test]
fn a_policy_that_settles_is_not_decided_now() {
    let e = engine("{ from = \"reported\" }");
    let headers = client_k1();
    assert!(
        e.decide_now(&completion(&headers)).is_none(),
        "decided with no reservation"
    );
    let (v, r) = decide(&e, &[]);
    assert!(v.allowed && r.is_some());
    assert_eq!(
        v.results[0].decision.remaining, 90,
        "charged once, by decide_reserving"
    );
}

#[test]
fn what_was_not_used_is_given_back_and_what_was_is_charged() {
    let e = engine("{ from = \"reported\" }");
    let (v, r) = decide(&e, &[]);
    assert!(v.allowed);
    assert_eq!(
        v.results[0].decision.remaining, 90,
        "the estimate is charged"
    );
    let r = r.expect("a reservation");
    assert_eq!(r.items()[0].charged, 10);
    let done = now(e.settle(&r, &reported(3)));
    assert_eq!(
        (done[0].actual, done[0].refunded, done[0].debited),
        (3, 7, 0)
    );
    let (v, r) = decide(&e, &[]);
    assert_eq!(v.results[0].decision.remaining, 87, "3 + 10 used");
    let done = now(e.settle(&r.unwrap(), &reported(50)));
    assert_eq!((done[0].debited, done[0].excess), (40, 0));
    let (v, _) = decide(&e, &[]);
    assert_eq!(v.results[0].decision.remaining, 37, "3 + 50 + 10 used");
}

#[test]
fn a_settlement_past_empty_puts_the_key_in_debt_until_the_rate_pays_it() {
    let e = engine("{ max_debt = 50 }");
    let (_, r) = decide(&e, &[]);
    // 10 charged; 200 used: 90 more fills the bucket... 100 is left after
    // the estimate's 10 is taken: 90 fills it, 50 is debt, 60 is excess.
    let done = now(e.settle(&r.unwrap(), &reported(200)));
    assert_eq!((done[0].debited, done[0].excess), (140, 50));
    let (v, r) = decide(&e, &[]);
    assert!(!v.allowed, "in debt");
    assert!(r.is_none(), "a refused request reserves nothing");
    let d = v.results[0].decision;
    assert_eq!(d.remaining, 0);
    // 50 of debt and 10 of cost at 100/s.
    assert_eq!(d.retry_after, Some(600_000_000));
    e.clock().advance(600_000_000 - 1);
    assert!(!decide(&e, &[]).0.allowed);
    e.clock().advance(1);
    assert!(decide(&e, &[]).0.allowed);
    let _ = e.clock().now();
}

#[test]
fn a_request_header_names_the_estimate_within_the_burst() {
    let e = engine("{ estimate = \"header:X-Max-Tokens\" }");
    let (v, r) = decide(&e, &[("x-max-tokens", "40")]);
    assert_eq!(v.results[0].decision.remaining, 60);
    assert_eq!(r.unwrap().items()[0].charged, 40);
    for bad in ["-5", "lots", "1.5", "1, 2"] {
        let (_, r) = decide(&e, &[("x-max-tokens", bad)]);
        assert_eq!(r.unwrap().items()[0].charged, 10, "{bad}: the limit's cost");
    }
    e.clock().advance(10 * SECOND);
    let (_, r) = decide(&e, &[("x-max-tokens", "999999999999")]);
    assert_eq!(r.unwrap().items()[0].charged, 100, "clamped to the burst");
}

#[test]
fn status_rules_give_back_failures_or_charge_only_them() {
    let e = engine("{ from = \"estimate\", refund_status = [\"5xx\"] }");
    let (_, r) = decide(&e, &[]);
    let failed = Observed {
        status: Some(502),
        ..Observed::default()
    };
    let done = now(e.settle(&r.unwrap(), &failed));
    assert_eq!((done[0].actual, done[0].refunded), (0, 10));
    assert_eq!(decide(&e, &[]).0.results[0].decision.remaining, 90);

    let e = engine("{ from = \"estimate\", charge_status = [401, \"5xx\"] }");
    for (status, remaining) in [(200, 100), (401, 90), (404, 90), (503, 80)] {
        let (_, r) = decide(&e, &[]);
        let seen = Observed {
            status: Some(status),
            ..Observed::default()
        };
        now(e.settle(&r.unwrap(), &seen));
        let (v, r) = decide(&e, &[]);
        // Peek by settling the probe back to nothing.
        now(e.settle(
            &r.unwrap(),
            &Observed {
                status: Some(200),
                ..Observed::default()
            },
        ));
        assert_eq!(
            v.results[0].decision.remaining + 10,
            remaining,
            "after {status}"
        );
    }
}

#[test]
fn settle_rules_are_checked_where_they_are_written() {
    let err = |settle: &str| {
        let toml =
            format!("[[limits]]\nname = \"t\"\nkey = \"ip\"\nrate = \"1/s\"\nsettle = {settle}\n");
        Policy::from_toml("bad.toml", &toml)
            .unwrap_err()
            .to_string()
    };
    assert!(
        err("{ from = \"tokens\" }").contains("bad.toml:5"),
        "{}",
        err("{ from = \"tokens\" }")
    );
    assert!(err("{ from = \"tokens\" }").contains("settle.from"));
    assert!(err("{ estimate = \"max_tokens\" }").contains("settle.estimate"));
    assert!(err("{ refund_status = [\"6xx\"] }").contains("settle.refund_status"));
    assert!(err("{ refund_status = [99] }").contains("not a status"));
    assert!(err("{ frm = \"usage\" }").contains("frm"));
    // The default algorithm (a token bucket) has no window to forgive at.
    assert!(err("{ debt = \"forgive\" }").contains("settle.debt"));
    assert!(err("{ debt = \"forgive\" }").contains("bad.toml:5"));
}

/// `debt = "forgive"`: a fixed window drops the debt when its window ends;
/// by default it is carried into the next windows.
#[test]
fn debt_is_carried_across_windows_unless_forgiven() {
    for (debt, refused_next_window) in [("carry", true), ("forgive", false)] {
        let toml = format!(
            "[[limits]]\nname = \"daily\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"fixed_window\"\nrate = \"100/s\"\nburst = 100\ncost = 10\nsettle = {{ debt = \"{debt}\", max_debt = 100 }}\n"
        );
        let policy = Policy::from_toml("settle.toml", &toml).unwrap();
        // Windows of 1 s, aligned: start at a window's beginning.
        let clock = ManualClock::new(1 << 50);
        let start = (1u64 << 50).div_ceil(SECOND) * SECOND;
        clock.set(start);
        let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock);
        let e = Engine::with_store(policy, Arc::new(store), KeyHasher::from_secret(b"s"));
        let (_, r) = decide(&e, &[]);
        // 10 charged, 200 used: the window's 100, then 100 of debt.
        let done = now(e.settle(&r.unwrap(), &reported(200)));
        assert_eq!((done[0].debited, done[0].excess), (190, 0), "{debt}");
        e.clock().advance(SECOND);
        let (v, _) = decide(&e, &[]);
        assert_eq!(!v.allowed, refused_next_window, "{debt}");
    }
}
