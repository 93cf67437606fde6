//! The concurrency limit against its reference model, a plain count of
//! what is held, on random sequences of acquisitions, releases, peeks and
//! debits at random times: the same decisions, never more than `max` held
//! by admissions, never below none, and time changing nothing.

use proptest::prelude::*;
use sluice_core::algorithms::concurrency::{ConcurrencyState, RETRY_HINT};
use sluice_core::{Algorithm, AlgorithmKind, Concurrency, LimitSpec, Limiter, Rate, State};

#[derive(Debug, Clone)]
enum Op {
    Take(u64),
    Release(u64),
    Debit(u64, u64),
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let op = prop_oneof![
        4 => (0u64..4).prop_map(Op::Take),
        3 => (0u64..4).prop_map(Op::Release),
        1 => (0u64..6, 0u64..3).prop_map(|(a, d)| Op::Debit(a, d)),
    ];
    (0u64..1_000_000_000_000, op)
}

proptest! {
    #[test]
    fn decides_as_a_count_of_what_is_held(
        max in 1u64..6,
        lease in 1u64..10_000_000_000,
        ops in proptest::collection::vec(op(), 1..80),
    ) {
        let alg = Concurrency::new(max, lease).unwrap();
        let mut state = ConcurrencyState::default();
        let mut held: u64 = 0;
        for (now, op) in ops {
            match op {
                Op::Take(cost) => {
                    let d = alg.check_and_apply(&mut state, now, cost);
                    if cost > max {
                        prop_assert!(d.is_err());
                        continue;
                    }
                    let d = d.unwrap();
                    let fits = held + cost <= max;
                    prop_assert_eq!(d.allowed, fits);
                    if fits {
                        held += cost;
                        prop_assert_eq!(d.remaining, max - held);
                        prop_assert_eq!(d.retry_after, None);
                    } else {
                        prop_assert_eq!(d.remaining, max.saturating_sub(held));
                        prop_assert_eq!(d.retry_after, Some(RETRY_HINT.min(lease)));
                    }
                    prop_assert_eq!(d.reset_after, if held == 0 { 0 } else { lease });
                }
                Op::Release(n) => {
                    alg.refund(&mut state, now, n);
                    held = held.saturating_sub(n);
                }
                Op::Debit(amount, max_debt) => {
                    let d = alg.debit(&mut state, now, amount, max_debt);
                    let charged = amount.min((max + max_debt).saturating_sub(held));
                    prop_assert_eq!((d.charged, d.excess), (charged, amount - charged));
                    held += charged;
                }
            }
            prop_assert_eq!(state.held, held);
            prop_assert_eq!(alg.idle_at(&state) == 0, held == 0);
        }
    }

    /// Built from a spec, through the run-time limiter: `max` in flight,
    /// and the spec's window (`burst / rate`) as the lease.
    #[test]
    fn a_spec_gives_its_burst_and_its_window_as_the_lease(max in 1u64..100, secs in 1u64..3600) {
        let spec = LimitSpec {
            algorithm: AlgorithmKind::Concurrency,
            rate: Rate::new(max, secs * 1_000_000_000).unwrap(),
            burst: max,
            nodelay: false,
        };
        let limiter = Limiter::new(&spec).unwrap();
        prop_assert_eq!(limiter.capacity(), max);
        let Limiter::Concurrency(c) = limiter else { panic!("{limiter:?}") };
        prop_assert_eq!(c.lease(), secs * 1_000_000_000);
        let mut state = State::Fresh;
        for _ in 0..max {
            prop_assert!(limiter.check_and_apply(&mut state, 0, 1).unwrap().allowed);
        }
        prop_assert!(!limiter.check_and_apply(&mut state, u64::MAX, 1).unwrap().allowed);
        limiter.refund(&mut state, 0, 1);
        prop_assert!(limiter.check_and_apply(&mut state, 0, 1).unwrap().allowed);
    }
}
