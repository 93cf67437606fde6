//! A policy of one limit that every request meets alike (one global limit,
//! no `match`, no client key, plans or access lists, enforced for every
//! key, no delay): decided without a plan. The request's key, one check on
//! the store, and the verdict: the steps the general path
//! ([`decide_plan_now`](super::Engine::decide_plan_now)) takes for such a
//! policy, without building the lists it needs for many limits.
//!
//! The usual small deployment (one limit per client IP, or one keyed by a
//! header with no `[client] key`) is such a policy. A test decides random requests through both paths and
//! compares every verdict.

use sluice_core::Clock;
use sluice_store::seam::Check;
use sluice_store::{KeyHasher, KeyId};

use super::Engine;
use super::compiled::Compiled;
use super::plan::too_costly;
use super::verdict::{DecideError, LimitResult, Verdict};
use crate::KeySource;
use crate::policy::{Policy, RequestInfo};

/// A policy's one limit, when the policy is decided alone.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lone {
    /// The limit's index in the policy.
    index: usize,
    /// The one key of a `global` limit, hashed once.
    key: Option<KeyId>,
}

impl Lone {
    /// The policy's one limit, if the policy is decided alone.
    pub(super) fn of(policy: &Policy, hasher: &KeyHasher) -> Option<Self> {
        let [index] = policy.global[..] else {
            return None;
        };
        let def = &policy.limits[index];
        let alone = policy.alike
            && !def.shadow
            && def.enforce_percent >= 100
            && def.limit.delay.is_none()
            && def.limit.plan.is_none();
        let key = (def.key == KeySource::Global).then(|| hasher.key_id(""));
        alone.then_some(Self { index, key })
    }
}

impl<C: Clock> Engine<C> {
    /// Decides a request under a policy's lone limit, on a store that
    /// answers at once: `None` if it did not.
    #[inline(always)]
    pub(super) fn decide_lone(
        &self,
        current: &Compiled,
        lone: &Lone,
        req: &RequestInfo<'_>,
    ) -> Option<Result<Verdict, DecideError>> {
        let (policy, i) = (&current.policy, lone.index);
        let def = &policy.limits[i];
        let key = match lone.key {
            Some(key) => key,
            None => match policy.key_id_for::<DecideError>(def, req, &self.hasher) {
                Ok(key) => key,
                Err(e) => return Some(Err(e)),
            },
        };
        let cost = req.cost.unwrap_or(def.cost);
        if let Some(e) = too_costly(&def.limit, cost) {
            return Some(Err(e));
        }
        let check = Check {
            counter: &current.counters[i],
            key,
            cost,
            reserve: 0,
        };
        Some(match self.store.check_one_now(&check)? {
            Ok(d) => Ok(Verdict::one(
                policy.headers,
                LimitResult::of(&def.limit, key, d),
            )),
            Err(e) => Err(DecideError::from(e).naming(&def.limit.name)),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::net::IpAddr;
    use std::sync::Arc;

    use http::{HeaderMap, Method};
    use proptest::prelude::*;
    use sluice_core::ManualClock;
    use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

    use super::super::Engine;
    use super::super::compiled::Compiled;
    use crate::policy::{Policy, RequestInfo};

    /// Policies of one limit that every request meets alike, over every
    /// algorithm and key source, with costs.
    const LONE: &[&str] = &[
        "key = \"ip\"\nalgorithm = \"gcra\"\nrate = \"2/s\"\nburst = 3",
        "key = \"ip\"\nalgorithm = \"token_bucket\"\nrate = \"2/s\"\nburst = 3\ncost = 2",
        "key = \"header:X-Api-Key\"\nalgorithm = \"sliding_window\"\nrate = \"3/s\"",
        "key = \"header:X-Api-Key\"\nalgorithm = \"fixed_window\"\nrate = \"3/s\"",
        "key = \"global\"\nalgorithm = \"leaky_bucket\"\nrate = \"2/s\"\nburst = 2",
        "key = \"global\"\nalgorithm = \"leaky_bucket\"\nrate = \"2/s\"\nburst = 2\nnodelay = true",
        "key = \"ip\"\nalgorithm = \"sliding_log\"\nrate = \"2/s\"\nburst = 2",
        // The client behind a trusted proxy: its key from X-Forwarded-For.
        "key = \"ip\"\nrate = \"2/s\"\nburst = 2\n[client]\ntrusted_proxies = [\"192.0.2.0/24\"]",
    ];

    /// Two engines on one clock and one hasher (the in-memory store's
    /// random one, or one keyed by a secret): one decides `toml`'s lone
    /// limit alone, the other through the general path.
    fn pair(toml: &str, random: bool) -> (Engine<ManualClock>, Engine<ManualClock>, ManualClock) {
        let text = format!("[[limits]]\nname = \"one\"\n{toml}\n");
        let clock = ManualClock::new(1 << 40);
        let hasher = if random {
            KeyHasher::random()
        } else {
            KeyHasher::from_secret(b"lone")
        };
        let engine = || {
            let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock.clone());
            let policy = Policy::from_toml("lone.toml", &text).unwrap();
            Engine::with_store(policy, Arc::new(store), hasher.clone())
        };
        let (alone, general) = (engine(), engine());
        assert!(alone.current.load().lone.is_some(), "{toml}: decided alone");
        let policy = Policy::from_toml("lone.toml", &text).unwrap();
        let mut compiled = Compiled::new(policy, general.store.as_ref(), &general.hasher, None);
        compiled.lone = None;
        general.current.store(Arc::new(compiled));
        (alone, general, clock)
    }

    /// One request: its peer, its key header (none, one, or two that
    /// disagree) and forwarded-for chain, its cost, and the time before it.
    #[derive(Debug, Clone)]
    struct Step {
        peer: Option<u8>,
        key: u8,
        cost: Option<u64>,
        after_ms: u64,
    }

    fn step() -> impl Strategy<Value = Step> {
        (
            proptest::option::weighted(0.9, 0u8..4),
            0u8..4,
            proptest::option::weighted(0.3, 0u64..5),
            prop_oneof![Just(0u64), 0u64..800],
        )
            .prop_map(|(peer, key, cost, after_ms)| Step {
                peer,
                key,
                cost,
                after_ms,
            })
    }

    fn peer(p: u8) -> IpAddr {
        match p {
            0 => "192.0.2.1".parse().unwrap(),
            1 => "192.0.2.2".parse().unwrap(),
            2 => "2001:db8::1".parse().unwrap(),
            _ => "2001:db8:1::1".parse().unwrap(),
        }
    }

    fn headers(key: u8) -> HeaderMap {
        let mut h = HeaderMap::new();
        match key {
            0 => {}
            1 => {
                h.insert("x-api-key", "alice".parse().unwrap());
                h.insert("x-forwarded-for", "198.51.100.7".parse().unwrap());
            }
            2 => {
                h.insert("x-api-key", "bob".parse().unwrap());
            }
            _ => {
                h.append("x-api-key", "alice".parse().unwrap());
                h.append("x-api-key", "bob".parse().unwrap());
                h.insert(
                    "x-forwarded-for",
                    "198.51.100.7, 2001:db8::9".parse().unwrap(),
                );
            }
        }
        h
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn a_lone_limit_decides_as_the_general_path(
            which in 0..LONE.len(),
            random in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            let (alone, general, clock) = pair(LONE[which], random);
            for s in &steps {
                clock.advance(s.after_ms * 1_000_000);
                let h = headers(s.key);
                let req = RequestInfo {
                    method: &Method::GET,
                    path: "/a/../b",
                    headers: &h,
                    peer: s.peer.map(peer),
                    cost: s.cost,
                };
                let a = alone.decide_now(&req).unwrap();
                let g = general.decide_now(&req).unwrap();
                match (a, g) {
                    (Ok(a), Ok(g)) => prop_assert_eq!(a, g, "{:?}", s),
                    (Err(a), Err(g)) => prop_assert_eq!(a.to_string(), g.to_string()),
                    (a, g) => prop_assert!(false, "{:?}: {:?} against {:?}", s, a, g),
                }
            }
        }
    }

    #[test]
    fn only_a_policy_met_alike_is_decided_alone() {
        let lone = |toml: &str| {
            let policy = Policy::from_toml("lone.toml", toml).unwrap();
            super::Lone::of(&policy, &KeyHasher::random()).is_some()
        };
        let one = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\n";
        assert!(lone(one));
        for other in [
            "shadow = true\n",
            "enforce_percent = 50\n",
            "on_limit = \"delay\"\nmax_delay = \"1s\"\n",
            "match.path = \"/api\"\n",
        ] {
            assert!(!lone(&format!("{one}{other}")), "{other}");
        }
        let two = format!("{one}[[limits]]\nname = \"b\"\nkey = \"ip\"\nrate = \"2/s\"\n");
        assert!(!lone(&two), "two limits");
        let denied = format!("{one}[access]\ndeny_cidrs = [\"198.51.100.0/24\"]\n");
        assert!(!lone(&denied), "an access list");
    }
}
