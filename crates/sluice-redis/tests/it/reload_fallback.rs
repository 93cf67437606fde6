//! A reload on a shared store: the local fallback forgets its shares of the
//! limits the new policy dropped, and keeps the others (its own and those of
//! anyone else sharing the store). Redis is unreachable here, so every
//! decision is the local fallback's. (A share lives as long as its limit's
//! counter: from when a policy is compiled to when it is replaced.)

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method};
use sluice_core::SystemClock;
use sluice_core::{AlgorithmKind, LimitSpec, Rate};
use sluice_policy::{Engine, Policy, RequestInfo};
use sluice_protect::ProtectOptions;
use sluice_redis::{RuntimeState, StoreUrl};
use sluice_store::seam::{Check, CounterDef, DecidedBy, Fallback, Store};
use sluice_store::{KeyHasher, KeyId};

const TWO: &str = r#"
[[limits]]
name = "kept"
key = "global"
rate = "10/s"

[[limits]]
name = "dropped"
key = "global"
rate = "5/s"
"#;

const ONE: &str = r#"
[[limits]]
name = "kept"
key = "global"
rate = "10/s"
"#;

#[test]
fn a_reload_forgets_the_fallback_shares_of_dropped_limits_only() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // Nothing listens on port 1: the store decides on its fallback.
        let url: StoreUrl = "redis://127.0.0.1:1".parse().unwrap();
        let shared = sluice_redis::shared(
            url,
            true,
            ProtectOptions {
                timeout: Duration::from_millis(50),
                ..ProtectOptions::default()
            },
        );
        let runtime = Arc::new(RuntimeState::new(shared.remote().clone()));
        let engine = Engine::on(
            Policy::from_toml("two.toml", TWO).unwrap(),
            shared.clone(),
            runtime,
            KeyHasher::random(),
            SystemClock::new(),
        );
        let headers = HeaderMap::new();
        let req = RequestInfo {
            method: &Method::GET,
            path: "/",
            headers: &headers,
            peer: None,
            cost: None,
            body: None,
        };
        assert!(engine.decide(&req).await.unwrap().allowed);

        // Someone else's limit on the same store (as the Envoy service's).
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(1),
            burst: 1,
            nodelay: false,
        };
        let someone = shared.counter(CounterDef::new("someone-else", spec).unwrap());
        let other = shared
            .check(&[Check {
                counter: &someone,
                key: KeyId(7),
                cost: 1,
                reserve: 0,
                lease: None,
            }])
            .await
            .unwrap();
        assert_eq!(other.by, DecidedBy::Fallback(Fallback::Local));
        assert_eq!(shared.local_limits(), 3);

        engine.replace_policy(Policy::from_toml("one.toml", ONE).unwrap());
        assert_eq!(shared.local_limits(), 2, "`dropped` is forgotten");
        assert!(engine.decide(&req).await.unwrap().allowed);
        assert_eq!(shared.local_limits(), 2, "`kept` and `someone-else` stay");
    });
}
