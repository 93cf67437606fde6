//! Adaptive overload protection (`sluice_core::adaptive`) against a simulated
//! upstream, on a simulated clock: no real time is read anywhere.
//!
//! The upstream is a queueing model: it serves `capacity` requests at once
//! at its base latency; with `n > capacity` in flight, a request admitted
//! then takes `base * n / capacity` (its throughput stays `capacity / base`,
//! so everything above it is queueing), times a little seeded noise. Tests
//! change its capacity and base latency between phases. Three classes:
//! 0 = "free", 1 = "pro", 2 = "enterprise".

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use proptest::prelude::*;
use sluice_core::adaptive::{AdaptiveConfig, AdaptiveLimit, Entry, Gate, GateConfig, Outcome};

const MS: u64 = 1_000_000;
const SECOND: u64 = 1_000 * MS;
const CLASSES: usize = 3;
const TIMEOUT: u64 = 2 * SECOND;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What happened in one phase of a simulation.
#[derive(Debug, Default)]
struct Phase {
    admitted: [u64; CLASSES],
    shed: [u64; CLASSES],
    first_shed: [Option<u64>; CLASSES],
    last_shed: Option<u64>,
    min_limit: u32,
    max_limit: u32,
    /// The latencies of the requests admitted in the phase.
    latencies: Vec<u64>,
}

impl Phase {
    fn shed_fraction(&self, class: usize) -> f64 {
        let total = self.admitted[class] + self.shed[class];
        self.shed[class] as f64 / total.max(1) as f64
    }

    fn p90_latency(&mut self) -> u64 {
        self.latencies.sort_unstable();
        let n = self.latencies.len();
        self.latencies
            .get((n * 9 / 10).min(n.saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    }
}

struct Sim {
    gate: Gate,
    now: u64,
    rng: Rng,
    capacity: u32,
    base: u64,
    upstream_in_flight: u32,
    /// Completion times, with the id of the entry.
    due: BinaryHeap<Reverse<(u64, u64)>>,
    entries: HashMap<u64, (Entry, Outcome)>,
    next_id: u64,
    /// Fractional arrivals carried over per class.
    carry: [f64; CLASSES],
}

impl Sim {
    fn new(config: GateConfig, capacity: u32, base: u64, seed: u64) -> Self {
        Self {
            gate: Gate::new(config).unwrap(),
            now: SECOND,
            rng: Rng(seed),
            capacity,
            base,
            upstream_in_flight: 0,
            due: BinaryHeap::new(),
            entries: HashMap::new(),
            next_id: 0,
            carry: [0.0; CLASSES],
        }
    }

    fn default_gate() -> GateConfig {
        GateConfig {
            classes: CLASSES,
            ..GateConfig::default()
        }
    }

    /// The latency of a request admitted with `n` in flight upstream.
    fn latency(&mut self, n: u32) -> u64 {
        let queued = self.base as f64 * f64::from(n.max(self.capacity)) / f64::from(self.capacity);
        let noisy = queued * (1.0 + 0.1 * self.rng.unit());
        noisy as u64
    }

    fn finish_due(&mut self) {
        while let Some(&Reverse((at, id))) = self.due.peek() {
            if at > self.now {
                break;
            }
            self.due.pop();
            let (entry, outcome) = self.entries.remove(&id).unwrap();
            self.upstream_in_flight -= 1;
            self.gate.leave(entry, at, outcome);
        }
    }

    fn arrive(&mut self, class: usize, phase: &mut Phase) {
        match self.gate.try_enter(class, self.now) {
            Ok(entry) => {
                phase.admitted[class] += 1;
                self.upstream_in_flight += 1;
                let latency = self.latency(self.upstream_in_flight);
                let (done, outcome) = if latency > TIMEOUT {
                    (TIMEOUT, Outcome::Timeout)
                } else {
                    (latency, Outcome::Success)
                };
                phase.latencies.push(done);
                let id = self.next_id;
                self.next_id += 1;
                self.entries.insert(id, (entry, outcome));
                self.due.push(Reverse((self.now + done, id)));
            }
            Err(shed) => {
                assert_eq!(shed.class, class);
                assert!(shed.retry_after > 0);
                phase.shed[class] += 1;
                phase.first_shed[class].get_or_insert(self.now);
                phase.last_shed = Some(self.now);
            }
        }
    }

    /// Runs for `length` with `rates[k]` arrivals of class `k` per ms, in
    /// 1 ms ticks (arrivals of a tick in a seeded random class order).
    fn run(&mut self, length: u64, rates: [f64; CLASSES]) -> Phase {
        let end = self.now + length;
        let mut phase = Phase {
            min_limit: u32::MAX,
            ..Phase::default()
        };
        while self.now < end {
            self.finish_due();
            let mut arrivals = Vec::new();
            for (class, rate) in rates.iter().enumerate() {
                self.carry[class] += rate;
                while self.carry[class] >= 1.0 {
                    self.carry[class] -= 1.0;
                    arrivals.push(class);
                }
            }
            for i in (1..arrivals.len()).rev() {
                arrivals.swap(i, (self.rng.next() % (i as u64 + 1)) as usize);
            }
            for class in arrivals {
                self.arrive(class, &mut phase);
            }
            let limit = self.gate.limit();
            let bounds = self.config_bounds();
            assert!(
                bounds.0 <= limit && limit <= bounds.1,
                "limit {limit} out of bounds"
            );
            phase.min_limit = phase.min_limit.min(limit);
            phase.max_limit = phase.max_limit.max(limit);
            self.now += MS;
        }
        phase
    }

    fn config_bounds(&self) -> (u32, u32) {
        let c = AdaptiveConfig::default();
        (c.min_limit, c.max_limit)
    }

    /// Lets every admitted request finish.
    fn drain(&mut self) {
        while let Some(&Reverse((at, _))) = self.due.peek() {
            self.now = self.now.max(at);
            self.finish_due();
        }
    }
}

/// Demand: 3 requests a ms in all (1.5 free, 1.0 pro, 0.5 enterprise); at a
/// 10 ms base latency that is about 30 in flight.
const DEMAND: [f64; CLASSES] = [1.5, 1.0, 0.5];

/// The warm-up after which a healthy upstream sees no shedding: 2 s, that
/// is 20 sampling windows at the default 100 ms.
const WARM_UP: u64 = 2 * SECOND;

#[test]
fn healthy_upstream_sheds_nothing_and_the_limit_stays_up() {
    let mut sim = Sim::new(Sim::default_gate(), 100, 10 * MS, 1);
    sim.run(WARM_UP, DEMAND);
    let phase = sim.run(30 * SECOND, DEMAND);
    assert_eq!(phase.shed, [0; CLASSES], "{phase:?}");
    // Never collapses: the limit stays above the demand (30 in flight) over
    // the lowest class's share.
    assert!(phase.min_limit >= 60, "min limit {}", phase.min_limit);
    sim.drain();
    assert_eq!(sim.gate.snapshot().in_flight, 0);
}

#[test]
fn degradation_sheds_the_lowest_class_first_and_recovery_stops_shedding() {
    let mut sim = Sim::new(Sim::default_gate(), 100, 10 * MS, 2);
    sim.run(WARM_UP + 8 * SECOND, DEMAND);

    // The upstream can now serve 12 at once: 1.2 requests a ms, against a
    // demand of 3.
    sim.capacity = 12;
    let degraded_at = sim.now;
    let mut degraded = sim.run(20 * SECOND, DEMAND);
    let free = degraded.first_shed[0].expect("free is shed");
    if let Some(enterprise) = degraded.first_shed[2] {
        assert!(free < enterprise, "{degraded:?}");
    }
    if let Some(pro) = degraded.first_shed[1] {
        assert!(free <= pro, "{degraded:?}");
    }
    assert!(free < degraded_at + SECOND, "shedding began late");
    let fractions: Vec<f64> = (0..CLASSES).map(|k| degraded.shed_fraction(k)).collect();
    assert!(fractions[0] > 0.5, "{fractions:?}");
    assert!(
        fractions[0] > fractions[1] && fractions[1] > fractions[2],
        "{fractions:?}"
    );
    assert!(fractions[2] < 0.05, "{fractions:?}");
    // The gate keeps the upstream's queue short: latency stays near its base.
    let p90 = degraded.p90_latency();
    assert!(p90 < 25 * MS, "p90 {p90}");

    // Recovery: shedding stops within 1.5 s (15 windows; about 0.8 s with
    // this seed) and stays stopped.
    sim.capacity = 100;
    let recovered_at = sim.now;
    let recovery = sim.run(3 * SECOND, DEMAND);
    let stopped_after = recovery.last_shed.map_or(0, |t| t + MS - recovered_at);
    assert!(stopped_after <= 1_500 * MS, "stopped after {stopped_after}");
    let after = sim.run(20 * SECOND, DEMAND);
    assert_eq!(after.shed, [0; CLASSES], "{after:?}");
    sim.drain();
    assert_eq!(sim.gate.snapshot().in_flight, 0);
}

#[test]
fn a_slower_upstream_is_relearned_not_collapsed_on() {
    // 1 request a ms at 10 ms: 10 in flight, capacity 100.
    let rates = [0.5, 0.3, 0.2];
    let mut sim = Sim::new(Sim::default_gate(), 100, 10 * MS, 3);
    sim.run(WARM_UP + 8 * SECOND, rates);
    // The upstream's base latency quadruples; it still has room (40 of 100).
    sim.base = 40 * MS;
    // The limit falls to its minimum, where the minimum latency is measured
    // again (after 5 windows), then grows back: about 2.5 s of shedding.
    let changed_at = sim.now;
    let transition = sim.run(5 * SECOND, rates);
    let stopped_after = transition.last_shed.map_or(0, |t| t + MS - changed_at);
    assert!(stopped_after <= 4 * SECOND, "stopped after {stopped_after}");
    let after = sim.run(20 * SECOND, rates);
    assert_eq!(after.shed, [0; CLASSES], "{transition:?} {after:?}");
    assert!(after.min_limit > 40, "{after:?}");
    let min = sim.gate.snapshot().min_latency.unwrap();
    assert!((40 * MS..=48 * MS).contains(&min), "min latency {min}");
}

#[test]
fn shedding_thresholds_follow_the_class_shares() {
    // Limit 20, three classes: thresholds 10, 15 and 20.
    let gate = Gate::new(Sim::default_gate()).unwrap();
    let snapshot = gate.snapshot();
    let thresholds: Vec<u32> = snapshot.classes.iter().map(|c| c.threshold).collect();
    assert_eq!(thresholds, [10, 15, 20]);
    let mut entries = Vec::new();
    for (class, &threshold) in thresholds.iter().enumerate() {
        while let Ok(entry) = gate.try_enter(class, 0) {
            entries.push(entry);
        }
        assert_eq!(gate.in_flight(), threshold);
        // Every class below is shed too.
        for below in 0..=class {
            assert!(gate.try_enter(below, 0).is_err());
        }
    }
    // A class past the top is the top class.
    assert_eq!(gate.try_enter(99, 0).unwrap_err().class, CLASSES - 1);
    let snapshot = gate.snapshot();
    assert_eq!(snapshot.classes[0].admitted, 10);
    assert_eq!(snapshot.classes[0].shed, 4);
    assert_eq!(snapshot.classes[2].shed, 3);
    for entry in entries {
        gate.leave(entry, MS, Outcome::Cancelled);
    }
    assert_eq!(gate.in_flight(), 0);
}

#[test]
fn invalid_configs_are_refused() {
    let mut config = Sim::default_gate();
    config.classes = 17;
    assert!(Gate::new(config).is_err());
    config.classes = 0;
    assert!(Gate::new(config).is_err());
    let limit = AdaptiveConfig {
        min_limit: 30,
        ..AdaptiveConfig::default()
    };
    assert!(AdaptiveLimit::new(limit).is_err());
    let limit = AdaptiveConfig {
        percentile: 0,
        ..AdaptiveConfig::default()
    };
    assert!(AdaptiveLimit::new(limit).is_err());
}

#[test]
fn the_gate_is_shared_across_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Gate>();
    let gate = Gate::new(Sim::default_gate()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let gate = &gate;
            s.spawn(move || {
                for i in 0..2_000u64 {
                    let now = i * MS;
                    if let Ok(entry) = gate.try_enter((i % 3) as usize, now) {
                        gate.leave(entry, now + (t + 1) * MS, Outcome::Success);
                    }
                }
            });
        }
    });
    let snapshot = gate.snapshot();
    assert_eq!(snapshot.in_flight, 0);
    assert!(snapshot.classes.iter().all(|c| c.in_flight == 0));
}

fn outcome(i: u8) -> Outcome {
    match i % 5 {
        0 => Outcome::Success,
        1 => Outcome::Dropped,
        2 => Outcome::UpstreamError,
        3 => Outcome::Timeout,
        _ => Outcome::Cancelled,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Whatever the upstream does, the limit stays within its bounds (checked
    /// every tick inside `run`) and nothing admitted is lost.
    #[test]
    fn limit_stays_in_bounds_and_entries_drain(
        seed in any::<u64>(),
        phases in prop::collection::vec(
            (1u32..150, 1u64..60, 0.0f64..3.0, 0.0f64..2.0, 0.0f64..1.0),
            1..4,
        ),
    ) {
        let mut sim = Sim::new(Sim::default_gate(), 50, 10 * MS, seed);
        for (capacity, base_ms, free, pro, enterprise) in phases {
            sim.capacity = capacity;
            sim.base = base_ms * MS;
            sim.run(3 * SECOND, [free, pro, enterprise]);
        }
        sim.drain();
        let snapshot = sim.gate.snapshot();
        prop_assert_eq!(snapshot.in_flight, 0);
        prop_assert!(snapshot.classes.iter().all(|c| c.in_flight == 0));
    }

    /// Under steady load well below capacity, after the warm-up nothing is
    /// shed and the limit never falls to its minimum.
    #[test]
    fn steady_healthy_load_never_collapses(
        seed in any::<u64>(),
        base_ms in 1u64..50,
        demand_share in 0.05f64..0.5,
        mix in (0.0f64..1.0, 0.0f64..1.0, 0.1f64..1.0),
    ) {
        let capacity = 100;
        // Requests a ms for `demand_share` of the capacity in flight.
        let total = demand_share * f64::from(capacity) / base_ms as f64;
        let sum = mix.0 + mix.1 + mix.2;
        let rates = [total * mix.0 / sum, total * mix.1 / sum, total * mix.2 / sum];
        let mut sim = Sim::new(Sim::default_gate(), capacity, base_ms * MS, seed);
        sim.run(WARM_UP + 3 * SECOND, rates);
        let steady = sim.run(10 * SECOND, rates);
        prop_assert_eq!(steady.shed, [0; CLASSES]);
        prop_assert!(steady.min_limit > AdaptiveConfig::default().min_limit);
    }

    /// Any sequence of entries and leaves, in any order and with any
    /// outcome, brings everything in flight back to zero.
    #[test]
    fn no_entry_is_lost(
        ops in prop::collection::vec((0usize..20, any::<bool>(), 0u64..50, any::<u8>()), 0..400),
    ) {
        let config = GateConfig { classes: 5, ..GateConfig::default() };
        let gate = Gate::new(config).unwrap();
        let mut open: Vec<Entry> = Vec::new();
        let mut now = 0;
        for (class, enter, step, pick) in ops {
            now += step * MS;
            if enter || open.is_empty() {
                if let Ok(entry) = gate.try_enter(class, now) {
                    open.push(entry);
                }
            } else {
                let entry = open.swap_remove(usize::from(pick) % open.len());
                gate.leave(entry, now, outcome(pick));
            }
            let snapshot = gate.snapshot();
            prop_assert_eq!(snapshot.in_flight as usize, open.len());
            let sum: u32 = snapshot.classes.iter().map(|c| c.in_flight).sum();
            prop_assert_eq!(sum, snapshot.in_flight);
        }
        for (i, entry) in open.into_iter().enumerate() {
            gate.leave(entry, now, outcome(i as u8));
        }
        prop_assert_eq!(gate.snapshot().in_flight, 0);
    }

    /// The estimator alone: any samples keep the limit within its bounds.
    #[test]
    fn estimator_limit_stays_in_bounds(
        samples in prop::collection::vec((0u64..300, 0u64..2_000, 0u32..2_000, any::<bool>(), 0u64..5), 0..600),
        min in 1u32..10,
        span in 0u32..200,
    ) {
        let config = AdaptiveConfig {
            min_limit: min,
            initial_limit: min + span / 2,
            max_limit: min + span,
            ..AdaptiveConfig::default()
        };
        let mut limit = AdaptiveLimit::new(config).unwrap();
        let mut now = 0;
        for (step_ms, latency_ms, in_flight, dropped, sheds) in samples {
            now += step_ms * MS;
            limit.note_sheds(sheds);
            limit.record(now, latency_ms * MS, in_flight, dropped);
            prop_assert!((config.min_limit..=config.max_limit).contains(&limit.limit()));
        }
    }
}
