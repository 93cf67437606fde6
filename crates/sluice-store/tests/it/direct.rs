//! The single-key limiter: its lock-free path decides exactly like the
//! algorithms, and threads sharing it admit exactly what it allows.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use proptest::prelude::*;
use sluice_core::{Algorithm, AlgorithmKind, Gcra, ManualClock, Rate, State};
use sluice_store::DirectLimiter;

use crate::common::{SEC, any_spec, lock_free_cases, spec};

#[test]
fn gcra_equivalents_with_whole_nanosecond_intervals_are_lock_free() {
    let clock = ManualClock::new(0);
    for (s, lock_free) in lock_free_cases() {
        let free = DirectLimiter::with_clock(&s, clock.clone())
            .unwrap()
            .is_lock_free();
        assert_eq!(free, lock_free, "{s:?}");
    }
}

proptest! {
    /// Whatever path it takes, the direct limiter decides exactly like the
    /// algorithm checked on its own state.
    #[test]
    fn decides_like_the_algorithm(
        s in any_spec(),
        start in 0u64..2_000_000_000_000_000_000,
        steps in prop::collection::vec((0u64..2 * SEC, 0u64..31), 1..60),
    ) {
        let clock = ManualClock::new(start);
        let direct = DirectLimiter::with_clock(&s, clock.clone()).unwrap();
        let model = s.build().unwrap();
        let mut state = State::Fresh;
        let mut now = start;
        for (dt, cost) in steps {
            now += dt;
            clock.set(now);
            let got = direct.check(cost);
            let want = model.check_and_apply(&mut state, now, cost);
            prop_assert_eq!(got, want);
        }
    }

    /// The 64-bit GCRA path equals the general one when the scale is 1.
    #[test]
    fn check_nanos_equals_check(
        per in 1u64..5_000_000,
        burst in 1u64..1000,
        tat in 0u64..3_000_000_000_000_000_000,
        now in 0u64..3_000_000_000_000_000_000,
        cost in 0u64..1001,
    ) {
        let gcra = Gcra::new(Rate::new(1, per).unwrap(), burst).unwrap();
        prop_assume!(gcra.scale() == 1);
        let state = sluice_core::algorithms::gcra::GcraState::from_tat(u128::from(tat));
        let general = gcra.check(&state, now, cost);
        let fast = gcra.check_nanos(tat, now, cost);
        match (general, fast) {
            (Ok(o), Ok((d, next))) => {
                prop_assert_eq!(o.decision, d);
                prop_assert_eq!(o.update.map(|u| u.tat()), next.map(u128::from));
            }
            (Err(a), Err(b)) => prop_assert_eq!(a, b),
            (a, b) => prop_assert!(false, "{:?} vs {:?}", a, b),
        }
    }
}

#[test]
fn threads_sharing_one_lock_free_limiter_admit_exactly_the_burst() {
    let clock = ManualClock::new(1_000 * SEC);
    let s = spec(AlgorithmKind::Gcra, Rate::per_second(10), 5_000, false);
    let limiter = Arc::new(DirectLimiter::with_clock(&s, clock).unwrap());
    assert!(limiter.is_lock_free());
    let admitted = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let (limiter, admitted) = (limiter.clone(), admitted.clone());
            std::thread::spawn(move || {
                for _ in 0..5_000 {
                    if limiter.check(1).unwrap().allowed {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(admitted.load(Ordering::Relaxed), 5_000);
}
