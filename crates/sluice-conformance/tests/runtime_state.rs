//! Runtime state behaves alike in memory and in Redis: plan assignments
//! through the engine, and credit balances through the runtime-state seam.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Duration;

use sluice_conformance::{Deployments, block, fresh_key};
use sluice_policy::PlanSource;
use sluice_store::KeyId;

const PLANS: &str = r#"
[client]
key = "header:X-Api-Key"
default_plan = "free"

[plans.free]
limits = [{ rate = "10/h", burst = 10 }]

[plans.pro]
limits = [{ rate = "100/h", burst = 100 }]
"#;

fn plans_are_assigned_and_cleared_alike(d: &Deployments) {
    for kind in d.kinds() {
        let e = d.engine(kind, PLANS);
        let key = fresh_key("plan");
        assert_eq!(
            e.plan_of(&key),
            Some(("free".into(), PlanSource::Default)),
            "{kind:?}"
        );
        block(e.set_plan(&key, "pro")).unwrap();
        assert_eq!(
            e.plan_of(&key),
            Some(("pro".into(), PlanSource::Runtime)),
            "{kind:?}"
        );
        assert!(
            block(e.set_plan(&key, "gold")).is_err(),
            "{kind:?}: no such plan"
        );
        assert!(block(e.clear_plan(&key)).unwrap(), "{kind:?}: it had one");
        assert!(
            !block(e.clear_plan(&key)).unwrap(),
            "{kind:?}: not any more"
        );
        assert_eq!(
            e.plan_of(&key),
            Some(("free".into(), PlanSource::Default)),
            "{kind:?}"
        );
    }
}

fn credits_are_set_spent_and_refunded_alike(d: &Deployments) {
    for kind in d.kinds() {
        let (_, runtime) = d.stores(kind);
        let key = KeyId(0xc0ffee);
        let wait = Duration::from_secs(2);
        block(runtime.set_credits(key, 5)).unwrap();
        assert_eq!(block(runtime.credits(key)).unwrap(), 5, "{kind:?}");
        assert_eq!(
            block(runtime.spend_credits(key, 3, wait)).unwrap(),
            Some(2),
            "{kind:?}"
        );
        assert_eq!(
            block(runtime.spend_credits(key, 3, wait)).unwrap(),
            None,
            "{kind:?}: short"
        );
        assert_eq!(
            block(runtime.credits(key)).unwrap(),
            2,
            "{kind:?}: nothing debited"
        );
        block(runtime.refund_credits(key, 3)).unwrap();
        assert_eq!(block(runtime.credits(key)).unwrap(), 5, "{kind:?}");
        // Refunded credits can be spent again (on Redis the instance's copy
        // of the balance, which gates spending, has the refund too).
        assert_eq!(
            block(runtime.spend_credits(key, 3, wait)).unwrap(),
            Some(2),
            "{kind:?}: spent after the refund"
        );
        // Another instance (its own copy, empty) is answered by the store's
        // script, not by a copy: short, it spends nothing.
        if kind != sluice_conformance::Kind::Memory {
            let (_, other) = d.stores(kind);
            block(other.set_credits(key, 5)).unwrap();
            block(runtime.set_credits(key, 5)).unwrap();
            assert_eq!(
                block(runtime.spend_credits(key, 3, wait)).unwrap(),
                Some(2),
                "{kind:?}"
            );
            // `other`'s copy still says 5; the store has 2.
            assert_eq!(
                block(other.spend_credits(key, 3, wait)).unwrap(),
                None,
                "{kind:?}: short, refused by the store"
            );
            assert_eq!(block(runtime.credits(key)).unwrap(), 2, "{kind:?}");
        }
        block(runtime.set_credits(key, 0)).unwrap();
        assert_eq!(block(runtime.credits(key)).unwrap(), 0, "{kind:?}");
        assert_eq!(
            block(runtime.spend_credits(key, 1, wait)).unwrap(),
            None,
            "{kind:?}"
        );
    }
}

/// One test, so that the Redis processes are started once and stopped at
/// its end.
#[test]
fn runtime_state_behaves_alike_everywhere() {
    let d = Deployments::start();
    plans_are_assigned_and_cleared_alike(&d);
    credits_are_set_spent_and_refunded_alike(&d);
}
