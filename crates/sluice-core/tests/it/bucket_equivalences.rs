//! The three bucket algorithms are one meter seen three ways:
//!
//! * GCRA makes exactly the token bucket's decisions (it only stores its
//!   state differently: one timestamp instead of a level and a time);
//! * the leaky bucket with `nodelay` makes exactly the token bucket's
//!   decisions;
//! * without `nodelay` it admits the same requests and only adds a `delay`:
//!   the time the bucket needs to drain what it held before the request,
//!   i.e. the `reset_after` a peek just before it would report.

use crate::common;

use common::scenario::{self, Scenario, SimClock, config, scenario};
use proptest::prelude::*;
use sluice_core::{Algorithm, Decision};

fn same_decisions(s: &Scenario) -> Result<(), TestCaseError> {
    let p = s.params;
    let tb = scenario::token_bucket(p);
    let gcra = scenario::gcra(p);
    let lb_nodelay = scenario::leaky_bucket(p, true);
    let lb = scenario::leaky_bucket(p, false);
    let (mut tb_s, mut gcra_s, mut lbn_s, mut lb_s) = Default::default();

    let mut clock = SimClock::new(p, s.start);
    for (i, step) in s.steps.iter().enumerate() {
        let (now, cost) = clock.next(step);
        let before = tb.check(&tb_s, now, 0).expect("peek").decision;
        let expected = tb.check_and_apply(&mut tb_s, now, cost);
        let got = gcra.check_and_apply(&mut gcra_s, now, cost);
        prop_assert_eq!(got, expected, "GCRA, step {} at {} cost {}", i, now, cost);
        let got = lb_nodelay.check_and_apply(&mut lbn_s, now, cost);
        prop_assert_eq!(got, expected, "leaky nodelay, step {}", i);
        let got = lb.check_and_apply(&mut lb_s, now, cost);
        let expected = expected.map(|d| Decision {
            delay: if d.allowed { before.reset_after } else { 0 },
            ..d
        });
        prop_assert_eq!(got, expected, "leaky, step {}", i);
        if let Ok(d) = expected {
            clock.saw(d);
        }
    }
    prop_assert_eq!(
        lb_s,
        tb_s,
        "the two buckets share their state type and values"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn gcra_and_the_leaky_bucket_decide_like_the_token_bucket(s in scenario()) {
        same_decisions(&s)?;
    }
}
