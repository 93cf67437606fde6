//! A policy whose limits every request meets alike (global limits only,
//! none with a `match`; no client key, plans or access lists; each enforced
//! for every key, none with a delay): decided without a plan. The
//! request's keys, one check of all its limits on the store (all or
//! nothing), and the verdict: the steps the general path
//! ([`decide_plan_now`](super::Engine::decide_plan_now)) takes for such a
//! policy, without building the lists it needs for classes, delays,
//! credits and shadowed limits.
//!
//! The usual small deployment (one limit per client IP, and perhaps one
//! keyed by a header, with no `[client] key`) is such a policy. A test
//! decides random requests through both paths and compares every verdict.

use sluice_core::Clock;
use sluice_store::seam::Check;
use sluice_store::{KeyHasher, KeyId};
use smallvec::SmallVec;

use super::Engine;
use super::compiled::Compiled;
use super::plan::too_costly;
use super::verdict::{DecideError, LimitResult, Results, Verdict};
use crate::KeySource;
use crate::policy::{Policy, RequestInfo};

/// A policy's limits, when every request meets them alike.
#[derive(Debug, Clone)]
pub(super) enum Alike {
    /// One limit, the usual policy: decided by its one check.
    One(Met),
    /// Several, decided together, all or nothing.
    All(SmallVec<[Met; 4]>),
}

/// One of them.
#[derive(Debug, Clone, Copy)]
pub(super) struct Met {
    /// The limit's index in the policy.
    index: usize,
    /// The one key of a `global` limit, hashed once.
    key: Option<KeyId>,
}

impl Alike {
    /// The policy's limits, if every request meets them alike; `hasher`
    /// hashes a `global` limit's one key.
    pub(super) fn of(policy: &Policy, hasher: &KeyHasher) -> Option<Self> {
        let plain = |i: &usize| {
            let def = &policy.limits[*i];
            !def.shadow
                && def.enforce_percent >= 100
                && def.limit.delay.is_none()
                && def.limit.plan.is_none()
                && def.limit.settle.is_none()
        };
        if !policy.alike || policy.global.is_empty() || !policy.global.iter().all(plain) {
            return None;
        }
        let everyone = hasher.key_id("");
        let met = |&index: &usize| Met {
            index,
            key: matches!(policy.limits[index].key, KeySource::Global).then_some(everyone),
        };
        Some(match &policy.global[..] {
            [one] => Self::One(met(one)),
            all => Self::All(all.iter().map(met).collect()),
        })
    }
}

impl<C: Clock> Engine<C> {
    /// Decides a request under a policy's one limit met alike, on a store
    /// that answers at once: `None` if it did not.
    #[inline(always)]
    pub(super) fn decide_one_alike(
        &self,
        current: &Compiled,
        met: &Met,
        req: &RequestInfo<'_>,
    ) -> Option<Result<Verdict, DecideError>> {
        let def = &current.policy.limits[met.index];
        let check = match self.check_of(current, met, req) {
            Ok(check) => check,
            Err(e) => return Some(Err(e)),
        };
        Some(match self.store.check_one_now(&check)? {
            Ok(d) => Ok(Verdict::one(
                current.policy.headers,
                LimitResult::of(&def.limit, check.key, d),
            )),
            Err(e) => Err(DecideError::from_store(e, [(&def.limit, check.cost)])),
        })
    }

    /// Decides a request under a policy's several limits met alike, with
    /// one check of them all, all or nothing, on a store that answers at
    /// once: `None` if it did not.
    #[inline(always)]
    pub(super) fn decide_all_alike(
        &self,
        current: &Compiled,
        all: &[Met],
        req: &RequestInfo<'_>,
    ) -> Option<Result<Verdict, DecideError>> {
        let policy = &current.policy;
        let limit = |i: usize| &policy.limits[all[i].index].limit;
        let mut checks: SmallVec<[Check<'_>; 4]> = SmallVec::new();
        // In order, as the general path places them: a limit's missing key
        // or impossible cost refuses before the next is looked at.
        for met in all {
            match self.check_of(current, met, req) {
                Ok(check) => checks.push(check),
                Err(e) => return Some(Err(e)),
            }
        }
        let mut pending = self.store.check(&checks);
        let checked = match pending.ready_mut()? {
            Ok(c) => c,
            Err(e) => {
                let asked = (0..checks.len()).map(|i| (limit(i), checks[i].cost));
                return Some(Err(DecideError::from_store(e.clone(), asked)));
            }
        };
        let mut results = Results::new();
        for (i, (c, d)) in checks.iter().zip(&checked.decisions).enumerate() {
            results.push(LimitResult::of(limit(i), c.key, *d));
        }
        Some(Ok(Verdict {
            allowed: checked.allowed,
            fallback: checked.fallback(),
            results,
            shadow: Default::default(),
            style: policy.headers,
        }))
    }

    /// The check of one limit met alike: the request's key and cost, or
    /// why it has none (a missing or ambiguous key), or can never pass.
    #[inline(always)]
    fn check_of<'c>(
        &self,
        current: &'c Compiled,
        met: &Met,
        req: &RequestInfo<'_>,
    ) -> Result<Check<'c>, DecideError> {
        let def = &current.policy.limits[met.index];
        let key = match met.key {
            Some(key) => key,
            None => current
                .policy
                .key_id_for::<DecideError>(def, req, &self.hasher)?,
        };
        let cost = req.cost.unwrap_or(def.cost);
        if let Some(e) = too_costly(&def.limit, cost) {
            return Err(e);
        }
        Ok(Check {
            counter: &current.counters[met.index],
            key,
            cost,
            reserve: 0,
            lease: None,
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

    /// Policies whose limits every request meets alike, over every
    /// algorithm and key source, with costs, one limit or several.
    const ALIKE: &[&str] = &[
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nalgorithm = \"gcra\"\nrate = \"2/s\"\nburst = 3",
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nalgorithm = \"token_bucket\"\nrate = \"2/s\"\nburst = 3\ncost = 2",
        "[[limits]]\nname = \"a\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"sliding_window\"\nrate = \"3/s\"",
        "[[limits]]\nname = \"a\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"fixed_window\"\nrate = \"3/s\"",
        "[[limits]]\nname = \"a\"\nkey = \"global\"\nalgorithm = \"leaky_bucket\"\nrate = \"2/s\"\nburst = 2",
        "[[limits]]\nname = \"a\"\nkey = \"global\"\nalgorithm = \"leaky_bucket\"\nrate = \"2/s\"\nburst = 2\nnodelay = true",
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nalgorithm = \"sliding_log\"\nrate = \"2/s\"\nburst = 2",
        // The client behind a trusted proxy: its key from X-Forwarded-For.
        "[client]\ntrusted_proxies = [\"192.0.2.0/24\"]\n[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"2/s\"\nburst = 2",
        // Several limits, all or nothing: per IP and per API key; an IP
        // guard with a global cap; three, two with the same key source.
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"3/s\"\nburst = 3\n[[limits]]\nname = \"b\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"token_bucket\"\nrate = \"2/s\"\nburst = 2",
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nalgorithm = \"sliding_window\"\nrate = \"2/s\"\ncost = 2\n[[limits]]\nname = \"b\"\nkey = \"global\"\nalgorithm = \"fixed_window\"\nrate = \"5/s\"",
        "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"4/s\"\nburst = 4\n[[limits]]\nname = \"b\"\nkey = \"ip\"\nalgorithm = \"leaky_bucket\"\nrate = \"1/s\"\nburst = 2\n[[limits]]\nname = \"c\"\nkey = \"header:X-Api-Key\"\nalgorithm = \"sliding_log\"\nrate = \"3/s\"\nburst = 3",
    ];

    /// Two engines on one clock and one hasher (the in-memory store's
    /// random one, or one keyed by a secret): one decides `toml`'s limits
    /// as met alike, the other through the general path.
    fn pair(toml: &str, random: bool) -> (Engine<ManualClock>, Engine<ManualClock>, ManualClock) {
        let clock = ManualClock::new(1 << 40);
        let hasher = if random {
            KeyHasher::random()
        } else {
            KeyHasher::from_secret(b"alike")
        };
        let engine = || {
            let store = MemoryStore::with_clock(MemoryStoreConfig::default(), clock.clone());
            let policy = Policy::from_toml("alike.toml", toml).unwrap();
            Engine::with_store(policy, Arc::new(store), hasher.clone())
        };
        let (alike, general) = (engine(), engine());
        assert!(alike.current.load().alike.is_some(), "{toml}: met alike");
        let policy = Policy::from_toml("alike.toml", toml).unwrap();
        let mut compiled = Compiled::new(policy, general.store.as_ref(), &general.hasher, None);
        compiled.alike = None;
        general.current.replace(|_| compiled);
        (alike, general, clock)
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
        fn limits_met_alike_decide_as_the_general_path(
            which in 0..ALIKE.len(),
            random in any::<bool>(),
            steps in proptest::collection::vec(step(), 1..40),
        ) {
            let (alike, general, clock) = pair(ALIKE[which], random);
            for s in &steps {
                clock.advance(s.after_ms * 1_000_000);
                let h = headers(s.key);
                let req = RequestInfo {
                    method: &Method::GET,
                    path: "/a/../b",
                    headers: &h,
                    peer: s.peer.map(peer),
                    cost: s.cost,
                    body: None,
                };
                let a = alike.decide_now(&req).unwrap();
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
    fn only_limits_met_alike_are_decided_without_a_plan() {
        let alike = |toml: &str| {
            let policy = Policy::from_toml("alike.toml", toml).unwrap();
            let store = MemoryStore::new(MemoryStoreConfig::default());
            Compiled::new(policy, &store, &KeyHasher::random(), None)
                .alike
                .is_some()
        };
        let one = "[[limits]]\nname = \"a\"\nkey = \"ip\"\nrate = \"1/s\"\n";
        let two = format!("{one}[[limits]]\nname = \"b\"\nkey = \"ip\"\nrate = \"2/s\"\n");
        assert!(alike(one));
        assert!(alike(&two), "two limits");
        for other in [
            "shadow = true\n",
            "enforce_percent = 50\n",
            "on_limit = \"delay\"\nmax_delay = \"1s\"\n",
            "match.path = \"/api\"\n",
        ] {
            assert!(!alike(&format!("{one}{other}")), "{other}");
            // One such limit among others is enough.
            assert!(!alike(&format!("{two}{other}")), "{other} on the second");
        }
        let denied = format!("{one}[access]\ndeny_cidrs = [\"198.51.100.0/24\"]\n");
        assert!(!alike(&denied), "an access list");
        let plans = "[client]\nkey = \"header:X-Api-Key\"\ndefault_plan = \"free\"\n[plans.free]\nlimits = [{ rate = \"1/s\" }]\n";
        assert!(!alike(&format!("{plans}{one}")), "plans");
    }
}
