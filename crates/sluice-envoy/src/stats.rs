//! Per-rule statistics, with the reference server's counters and meaning
//! (its `base_limiter.go`), labelled by domain and rule, served on
//! `/metrics`:
//!
//! | metric | what |
//! |---|---|
//! | `sluice_envoy_total_hits_total` | hits (the cost) of every descriptor that met the rule |
//! | `sluice_envoy_over_limit_total` | hits past the limit |
//! | `sluice_envoy_near_limit_total` | hits past the near-limit ratio (0.8 of the limit) and within the limit |
//! | `sluice_envoy_within_limit_total` | hits of descriptors within the limit |
//! | `sluice_envoy_shadow_mode_total` | hits past the limit that shadow mode let through |
//! | `sluice_envoy_stats_series` | series kept; `sluice_envoy_stats_series_dropped_total`: hits of series past the cap |
//! | `sluice_envoy_overrides_ignored_total` | per-request limits not applied (an unknown unit, or [too many in use](crate::overrides)): the config's rule applied |
//!
//! `rule` is the rule's place in the tree (`message_type_marketing.to_number`),
//! or with `detailed_metric` or `value_to_metric` the request's values as
//! the reference server puts them in its keys. Those grow with traffic, so
//! at most [`MAX_SERIES`] series named by requests are kept (a rule's own
//! series, named by the config, always is: requests cannot crowd it out),
//! each `rule` at most
//! [`MAX_RULE_BYTES`] long (a longer one is cut, and ends with a hash of
//! the whole); the hits of any further series are counted in
//! `sluice_envoy_stats_series_dropped_total`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// The most (domain, rule) series kept.
pub const MAX_SERIES: usize = 10_000;

/// The longest `rule` label kept: request values may be long.
pub const MAX_RULE_BYTES: usize = 256;

/// The reference server's default `NEAR_LIMIT_RATIO`.
pub const NEAR_LIMIT_RATIO: f64 = 0.8;

/// One series' counters.
#[derive(Debug, Default)]
pub struct Counters {
    total_hits: AtomicU64,
    over_limit: AtomicU64,
    near_limit: AtomicU64,
    within_limit: AtomicU64,
    shadow_mode: AtomicU64,
}

/// One descriptor's decision, as the statistics read it.
#[derive(Debug, Clone, Copy)]
pub struct Hit {
    /// Its cost.
    pub hits: u64,
    /// The rule's limit (requests per unit).
    pub limit: u64,
    /// What was used of the limit before this descriptor.
    pub before: u64,
    /// Whether the descriptor was over its limit.
    pub over: bool,
    /// Whether the rule is in shadow mode.
    pub shadow: bool,
}

/// The statistics of every rule, kept across reloads.
#[derive(Debug, Default)]
pub struct RuleStats {
    /// By domain, then rule.
    series: RwLock<Series>,
    dropped: AtomicU64,
    ignored_overrides: AtomicU64,
}

#[derive(Debug, Default)]
struct Series {
    by_domain: HashMap<String, HashMap<String, Arc<Counters>>>,
    len: usize,
}

impl Series {
    fn get(&self, domain: &str, rule: &str) -> Option<&Arc<Counters>> {
        self.by_domain.get(domain)?.get(rule)
    }
}

impl RuleStats {
    /// Counts one descriptor's decision under (`domain`, `rule`).
    /// `rule` is named by the request (its values), so the series counts
    /// toward [`MAX_SERIES`].
    pub fn record(&self, domain: &str, rule: &str, hit: Hit) {
        match self.counters(domain, rule, true) {
            Some(c) => Self::record_on(&c, hit),
            None => self.dropped(hit),
        }
    }

    /// The counters of a rule's own series (`rule` named by the config,
    /// not by a request), created if new, whatever the cap: a caller that
    /// counts often on one series keeps them, and counts on them with
    /// [`record_on`](Self::record_on).
    pub fn series(&self, domain: &str, rule: &str) -> Arc<Counters> {
        self.counters(domain, rule, false)
            .unwrap_or_else(|| Arc::new(Counters::default()))
    }

    /// Counts a per-request limit that was not applied (its unit unknown,
    /// or the map of them full): its descriptor met the config's rule.
    pub fn ignored_override(&self) {
        self.ignored_overrides.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts hits of a series past the cap.
    pub fn dropped(&self, hit: Hit) {
        self.dropped.fetch_add(hit.hits, Ordering::Relaxed);
    }

    /// Counts one descriptor's decision on a series' counters.
    pub fn record_on(c: &Counters, hit: Hit) {
        let add = |n: &AtomicU64, by: u64| {
            if by > 0 {
                n.fetch_add(by, Ordering::Relaxed);
            }
        };
        let Hit {
            hits,
            limit,
            before,
            over,
            shadow,
        } = hit;
        let after = before.saturating_add(hits);
        // The near-limit threshold, as the reference server rounds it.
        let near = (limit as f64 * NEAR_LIMIT_RATIO).floor() as u64;
        add(&c.total_hits, hits);
        if over {
            // A refused descriptor's `before` may read below `limit - hits`
            // (a fallback's share, costs summed over repeated descriptors):
            // it is over by at least nothing.
            let past = if before >= limit {
                hits
            } else {
                after.saturating_sub(limit)
            };
            add(&c.over_limit, past);
            if before < limit {
                add(&c.near_limit, limit.saturating_sub(near.max(before)));
            }
            if shadow {
                add(&c.shadow_mode, past);
            }
        } else {
            if after > near {
                add(
                    &c.near_limit,
                    if before >= near { hits } else { after - near },
                );
            }
            add(&c.within_limit, hits);
        }
    }

    /// The counters of (`domain`, `rule`), created if new; `capped`: none
    /// is created past [`MAX_SERIES`].
    fn counters(&self, domain: &str, rule: &str, capped: bool) -> Option<Arc<Counters>> {
        let cut;
        let rule = if rule.len() > MAX_RULE_BYTES {
            cut = shortened(rule);
            cut.as_str()
        } else {
            rule
        };
        {
            let all = self.series.read();
            if let Some(c) = all.get(domain, rule) {
                return Some(c.clone());
            }
            // Full: no write lock, which every other call would wait on.
            if capped && all.len >= MAX_SERIES {
                return None;
            }
        }
        let mut all = self.series.write();
        if let Some(c) = all.get(domain, rule) {
            return Some(c.clone());
        }
        if capped && all.len >= MAX_SERIES {
            return None;
        }
        all.len += 1;
        let c = Arc::new(Counters::default());
        all.by_domain
            .entry(domain.to_owned())
            .or_default()
            .insert(rule.to_owned(), c.clone());
        Some(c)
    }

    /// The counters of one series: total, over, near, within, shadow.
    pub fn get(&self, domain: &str, rule: &str) -> Option<[u64; 5]> {
        let all = self.series.read();
        let c = all.get(domain, rule)?;
        Some([
            c.total_hits.load(Ordering::Relaxed),
            c.over_limit.load(Ordering::Relaxed),
            c.near_limit.load(Ordering::Relaxed),
            c.within_limit.load(Ordering::Relaxed),
            c.shadow_mode.load(Ordering::Relaxed),
        ])
    }
}

/// A `rule` label past [`MAX_RULE_BYTES`]: its start, and a hash of the
/// whole, so that two long values stay apart.
fn shortened(rule: &str) -> String {
    let mut end = MAX_RULE_BYTES - 20;
    while !rule.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}~{:016x}",
        &rule[..end],
        sluice_store::fnv1a(rule.as_bytes())
    )
}

/// Serves [`RuleStats`] on a Prometheus registry.
#[derive(Debug)]
pub struct StatsCollector(pub Arc<RuleStats>);

impl Collector for StatsCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let all = self.0.series.read();
        let mut keys: Vec<(&str, &str, &Counters)> = all
            .by_domain
            .iter()
            .flat_map(|(d, rules)| {
                rules
                    .iter()
                    .map(move |(r, c)| (d.as_str(), r.as_str(), &**c))
            })
            .collect();
        keys.sort_unstable_by_key(|(d, r, _)| (*d, *r));
        type Read = fn(&Counters) -> &AtomicU64;
        let families: [(&str, &str, Read); 5] = [
            (
                "sluice_envoy_total_hits",
                "Hits of descriptors that met the rule",
                |c| &c.total_hits,
            ),
            (
                "sluice_envoy_over_limit",
                "Hits past the rule's limit",
                |c| &c.over_limit,
            ),
            (
                "sluice_envoy_near_limit",
                "Hits past the near-limit ratio, within the limit",
                |c| &c.near_limit,
            ),
            (
                "sluice_envoy_within_limit",
                "Hits within the rule's limit",
                |c| &c.within_limit,
            ),
            (
                "sluice_envoy_shadow_mode",
                "Hits past the limit let through by shadow mode",
                |c| &c.shadow_mode,
            ),
        ];
        for (name, help, read) in families {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for (domain, rule, c) in &keys {
                let labels = [("domain", *domain), ("rule", *rule)];
                let value = read(c).load(Ordering::Relaxed);
                ConstCounter::new(value).encode(metric.encode_family(&labels)?)?;
            }
        }
        let series = i64::try_from(all.len).unwrap_or(i64::MAX);
        ConstGauge::new(series).encode(encoder.encode_descriptor(
            "sluice_envoy_stats_series",
            "Per-rule statistics series kept",
            None,
            MetricType::Gauge,
        )?)?;
        ConstCounter::new(self.0.dropped.load(Ordering::Relaxed)).encode(
            encoder.encode_descriptor(
                "sluice_envoy_stats_series_dropped",
                "Hits of series past the cap, not kept",
                None,
                MetricType::Counter,
            )?,
        )?;
        ConstCounter::new(self.0.ignored_overrides.load(Ordering::Relaxed)).encode(
            encoder.encode_descriptor(
                "sluice_envoy_overrides_ignored",
                "Per-request limits not applied (unknown unit, or too many in use)",
                None,
                MetricType::Counter,
            )?,
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(hits: u64, before: u64, over: bool) -> Hit {
        Hit {
            hits,
            limit: 10,
            before,
            over,
            shadow: false,
        }
    }

    #[test]
    fn counts_as_the_reference_server_does() {
        // base_limiter.go with a limit of 10 (near at 8).
        let s = RuleStats::default();
        for before in 0..7 {
            s.record("d", "r", hit(1, before, false));
        }
        assert_eq!(s.get("d", "r"), Some([7, 0, 0, 7, 0]));
        // 7 -> 9 crosses the near-limit threshold: 1 of 2 hits is near.
        s.record("d", "r", hit(2, 7, false));
        assert_eq!(s.get("d", "r"), Some([9, 0, 1, 9, 0]));
        // 9 -> 12 crosses the limit: 2 over, 1 near.
        s.record("d", "r", hit(3, 9, true));
        assert_eq!(s.get("d", "r"), Some([12, 2, 2, 9, 0]));
        // Already over: every hit is over.
        s.record("d", "r", hit(2, 12, true));
        assert_eq!(s.get("d", "r"), Some([14, 4, 2, 9, 0]));
        s.record(
            "d",
            "r",
            Hit {
                shadow: true,
                ..hit(1, 10, true)
            },
        );
        assert_eq!(s.get("d", "r"), Some([15, 5, 2, 9, 1]));
        // Refused below the limit (three descriptors of 3 on a limit of 5,
        // say): no underflow.
        s.record(
            "d",
            "q",
            Hit {
                limit: 5,
                ..hit(3, 0, true)
            },
        );
        assert_eq!(s.get("d", "q"), Some([3, 0, 1, 0, 0]));
    }

    #[test]
    fn long_rule_labels_are_cut_and_stay_apart() {
        let s = RuleStats::default();
        let (a, b) = ("v".repeat(70_000), format!("{}w", "v".repeat(70_000)));
        s.record("d", &a, hit(1, 0, false));
        s.record("d", &b, hit(1, 0, false));
        let all = s.series.read();
        let kept: Vec<&String> = all.by_domain["d"].keys().collect();
        assert_eq!(kept.len(), 2);
        assert!(
            kept.iter().all(|k| k.len() <= MAX_RULE_BYTES),
            "{:?}",
            kept.iter().map(|k| k.len()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn series_are_capped_and_the_rest_counted() {
        let s = RuleStats::default();
        for i in 0..MAX_SERIES + 5 {
            s.record("d", &format!("r{i}"), hit(1, 0, false));
        }
        assert_eq!(s.series.read().len, MAX_SERIES);
        assert_eq!(s.dropped.load(Ordering::Relaxed), 5);
        // A kept series still counts.
        s.record("d", "r0", hit(1, 1, false));
        assert_eq!(s.get("d", "r0").map(|c| c[0]), Some(2));
        // Requests that filled the cap do not crowd out a rule's own
        // series.
        RuleStats::record_on(&s.series("d", "own.rule"), hit(1, 0, false));
        assert_eq!(s.get("d", "own.rule").map(|c| c[0]), Some(1));
    }
}
