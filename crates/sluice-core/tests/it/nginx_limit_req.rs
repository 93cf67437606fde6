//! The leaky bucket against nginx's `limit_req`, re-implemented from
//! `ngx_http_limit_req_module.c`: the same requests pass, and with
//! nginx's `burst=N` written as Sluice's `burst = N + 1`.
//!
//! nginx counts "excess" in thousandths of a request on a millisecond clock,
//! not counting the request being served; a rate of `r` per second drains
//! exactly `r` thousandths per millisecond, so for `r/s` rates its arithmetic
//! is exact and the verdicts must agree exactly. nginx truncates the delay
//! to whole milliseconds; Sluice rounds it up to the nanosecond, so nginx's
//! delay is Sluice's delay in whole milliseconds, rounded down.

use crate::common;

use common::MS;
use common::scenario::config;
use proptest::prelude::*;
use sluice_core::{Algorithm, LeakyBucket, Rate};

/// One `limit_req` zone entry, as nginx keeps it.
struct Nginx {
    /// `rate=R r/s`, in thousandths of a request per second.
    rate: i64,
    /// `burst=N`, in thousandths of a request.
    burst: i64,
    /// `(excess, last)`, once the key has been seen.
    node: Option<(i64, i64)>,
}

impl Nginx {
    fn new(per_second: u64, burst: u64) -> Self {
        let thousand = |n: u64| i64::try_from(n * 1000).expect("small");
        Self {
            rate: thousand(per_second),
            burst: thousand(burst),
            node: None,
        }
    }

    /// `Some(delay in ms)` if the request passes, `None` if it is refused
    /// (503). `now` is in milliseconds.
    fn request(&mut self, now: i64) -> Option<i64> {
        let Some((excess, last)) = self.node else {
            // A new node: the request is served at once, no excess.
            self.node = Some((0, now));
            return Some(0);
        };
        let ms = now - last;
        let excess = (excess - self.rate * ms / 1000 + 1000).max(0);
        if excess > self.burst {
            return None;
        }
        self.node = Some((excess, if ms != 0 { now } else { last }));
        Some(excess * 1000 / self.rate)
    }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn leaky_bucket_is_nginx_limit_req_with_burst_plus_one(
        per_second in 1u64..=1000,
        nginx_burst in 0u64..=20,
        nodelay in any::<bool>(),
        start_ms in prop_oneof![Just(0i64), 1_700_000_000_000i64..=2_000_000_000_000],
        gaps in prop::collection::vec(
            prop_oneof![3 => Just(0i64), 3 => 0i64..=20, 2 => 0i64..=3000],
            1..200,
        ),
    ) {
        let lb = LeakyBucket::new(Rate::per_second(per_second), nginx_burst + 1, nodelay)
            .expect("valid limit");
        let mut nginx = Nginx::new(per_second, nginx_burst);
        let mut state = Default::default();
        let mut now = start_ms;
        for (i, gap) in gaps.into_iter().enumerate() {
            now += gap;
            let ns = u64::try_from(now).expect("positive") * MS;
            let sluice = lb.check_and_apply(&mut state, ns, 1).expect("cost 1");
            let expected = nginx.request(now);
            prop_assert_eq!(sluice.allowed, expected.is_some(), "request {} at {} ms", i, now);
            if let Some(delay_ms) = expected {
                let delay = if nodelay { 0 } else { delay_ms };
                prop_assert_eq!(
                    i64::try_from(sluice.delay / MS).expect("small"),
                    delay,
                    "request {}: delay {} ns",
                    i,
                    sluice.delay
                );
            }
        }
    }
}
