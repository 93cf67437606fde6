//! Workloads shared by Sluice's benchmarks: key sequences (uniform and
//! Zipf-like) from a small deterministic generator, so that Sluice and its
//! peers see exactly the same keys in the same order.

/// The tower-layer benchmarks' configs (`benches/layer.rs`, the
/// `axum_hello` app): limits at a rate that never refuses, so every request
/// pays for its checks and the response fields.
pub mod layer_configs {
    /// The example app's limit (`examples/axum-app`): per client IP.
    pub const ONE_LIMIT: &str = r#"
    [[limits]]
    name = "per-ip"
    key = "ip"
    rate = "100000000/s"
"#;

    /// [`ONE_LIMIT`] with the rate-limit fields sent on refusals only
    /// (`[headers] on_admitted = false`), as tower_governor sends its own
    /// by default.
    pub const ONE_LIMIT_REFUSALS_ONLY: &str = r#"
    [headers]
    on_admitted = false

    [[limits]]
    name = "per-ip"
    key = "ip"
    rate = "100000000/s"
"#;

    /// Two limits: per client IP and per API key.
    pub const TWO_LIMITS: &str = r#"
    [[limits]]
    name = "ip-guard"
    key = "ip"
    algorithm = "gcra"
    rate = "100000000/s"

    [[limits]]
    name = "per-key"
    key = "header:X-Api-Key"
    algorithm = "token_bucket"
    rate = "100000000/s"
"#;

    /// A global cap beside a per-IP limit: every request on one key of
    /// the first, decided all or nothing with its client's.
    pub const GLOBAL_AND_IP: &str = r#"
    [[limits]]
    name = "everyone"
    key = "global"
    algorithm = "gcra"
    rate = "100000000/s"

    [[limits]]
    name = "per-ip"
    key = "ip"
    algorithm = "gcra"
    rate = "100000000/s"
"#;
}

/// The engine benchmark's workload (`benches/engine.rs`, and the
/// `engine_instructions` binary that counts it under callgrind).
pub mod engine_workload {
    use std::net::{IpAddr, Ipv4Addr};

    /// One limit keyed by client IP, beside governor's quota of the same
    /// rate and burst.
    pub const ONE_LIMIT: &str = r#"
[[limits]]
name = "per-ip"
key = "ip"
algorithm = "gcra"
rate = "1000/s"
burst = 1000
"#;

    /// One limit for every request together (one key): what governor's
    /// direct limiter is, with the same rate and burst.
    pub const ONE_GLOBAL: &str = r#"
[[limits]]
name = "everyone"
key = "global"
algorithm = "gcra"
rate = "1000/s"
burst = 1000
"#;

    /// A global cap beside a per-IP limit, decided together (all or
    /// nothing), at rates that admit every request of the benchmarks.
    pub const GLOBAL_AND_IP: &str = r#"
[[limits]]
name = "per-ip"
key = "ip"
rate = "100000000/s"

[[limits]]
name = "everyone"
key = "global"
rate = "100000000/s"
"#;

    /// The number of distinct clients.
    pub const KEYS: u64 = 100_000;

    /// Whether `engine` admits a `GET /` from `peer` with `headers`: its
    /// public decision call, the answer read in place as the tower layer
    /// does (a `match` on it: the verdict is not moved again to be read).
    #[inline(always)]
    pub fn admits(engine: &sluice_policy::Engine, headers: &http::HeaderMap, peer: IpAddr) -> bool {
        let req = sluice_policy::RequestInfo {
            method: &http::Method::GET,
            path: "/",
            headers,
            peer: Some(peer),
            cost: None,
            body: None,
        };
        matches!(
            engine.decide_now(&req),
            Some(Ok(sluice_policy::Verdict { allowed: true, .. }))
        )
    }

    /// governor's quota of the same rate and burst as [`ONE_LIMIT`]'s
    /// (1000/s, burst 1000).
    pub fn governor_quota() -> governor::Quota {
        let n = std::num::NonZeroU32::new(1000).unwrap_or(std::num::NonZeroU32::MIN);
        governor::Quota::per_second(n).allow_burst(n)
    }

    /// governor's keyed limiter under [`governor_quota`], clients `0..keys`
    /// each checked once (warm, as Sluice's side is).
    pub fn governor_keyed(keys: u64) -> governor::DefaultKeyedRateLimiter<IpAddr> {
        let gov = governor::RateLimiter::keyed(governor_quota());
        for k in 0..keys {
            let _ = gov.check_key(&ip(k));
        }
        gov
    }

    /// Client `k`'s address: 10.0.0.0/8 holds 2^24 addresses, every key
    /// its own.
    pub fn ip(k: u64) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | (k as u32 & 0x00ff_ffff)))
    }
}

/// A xorshift64* generator: deterministic, fast, good enough for workloads.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a non-zero seed.
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A float uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `len` keys drawn uniformly from `0..keys`.
pub fn uniform_keys(keys: u64, len: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng::new(seed);
    (0..len).map(|_| rng.next_u64() % keys).collect()
}

/// `len` keys from `0..keys` with Zipf-like popularity: key `i` is drawn
/// with probability proportional to `1 / (i + 1)^s`.
pub fn zipf_keys(keys: u64, len: usize, s: f64, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(keys as usize);
    let mut total = 0.0;
    for i in 0..keys {
        total += 1.0 / ((i + 1) as f64).powf(s);
        cdf.push(total);
    }
    let mut rng = Rng::new(seed);
    (0..len)
        .map(|_| {
            let x = rng.next_f64() * total;
            cdf.partition_point(|c| *c < x) as u64
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zipf_favours_low_keys() {
        let keys = zipf_keys(1000, 100_000, 1.0, 7);
        let zero = keys.iter().filter(|k| **k == 0).count();
        let last = keys.iter().filter(|k| **k == 999).count();
        assert!(zero > 50 * last.max(1), "{zero} vs {last}");
        assert!(keys.iter().all(|k| *k < 1000));
    }

    #[test]
    fn uniform_covers_the_range() {
        let keys = uniform_keys(100, 100_000, 3);
        assert!((0..100).all(|k| keys.contains(&k)));
    }
}
