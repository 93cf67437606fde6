//! The consistent-hash ring: balance, and how many tags move when a shard
//! is added or removed. Pure computation, no Redis needed.

use sluice_redis::topology::ring::{Ring, stable_hash};

/// Tags like the store's: 32 hex digits of a keyed hash.
fn tags(n: usize) -> Vec<String> {
    (0..n as u64)
        .map(|i| {
            format!(
                "{:016x}{:016x}",
                stable_hash(&i.to_le_bytes()),
                stable_hash(&(i ^ 0x5eed).to_be_bytes())
            )
        })
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.0.0.{}:6379", i + 1)).collect()
}

const TAGS: usize = 100_000;

#[test]
fn adding_a_fourth_node_moves_about_a_quarter_all_to_the_new_node() {
    let tags = tags(TAGS);
    let before = Ring::new(&names(3));
    let after = Ring::new(&names(4));
    let mut moved = 0;
    for tag in &tags {
        let (a, b) = (before.node(tag), after.node(tag));
        if a != b {
            moved += 1;
            assert_eq!(b, 3, "tag {tag} moved from node {a} to old node {b}");
        }
    }
    let share = moved as f64 / TAGS as f64;
    eprintln!(
        "3 -> 4 nodes: {moved} of {TAGS} tags moved ({:.2} %; ideal 25 %)",
        share * 100.0
    );
    assert!((0.20..=0.30).contains(&share), "moved share {share}");
}

#[test]
fn growing_from_n_to_n_plus_one_moves_about_one_in_n_plus_one() {
    let tags = tags(TAGS);
    for n in 1..8 {
        let before = Ring::new(&names(n));
        let after = Ring::new(&names(n + 1));
        let moved = tags
            .iter()
            .filter(|t| before.node(t) != after.node(t))
            .count();
        let share = moved as f64 / TAGS as f64;
        let ideal = 1.0 / (n + 1) as f64;
        eprintln!(
            "{n} -> {} nodes: {:.2} % moved (ideal {:.2} %)",
            n + 1,
            share * 100.0,
            ideal * 100.0
        );
        assert!(
            (share - ideal).abs() <= ideal * 0.2,
            "{n} -> {}: {share} vs {ideal}",
            n + 1
        );
    }
}

#[test]
fn removing_a_node_moves_only_its_tags() {
    let tags = tags(TAGS);
    let all = names(4);
    let without_b: Vec<String> = all
        .iter()
        .filter(|n| !n.ends_with(".2:6379"))
        .cloned()
        .collect();
    let full = Ring::new(&all);
    let reduced = Ring::new(&without_b);
    for tag in &tags {
        let old = &all[full.node(tag)];
        let new = &without_b[reduced.node(tag)];
        if old != new {
            assert_eq!(old, &all[1], "tag {tag} moved although its node stayed");
        }
    }
}

#[test]
fn every_node_gets_a_fair_share() {
    let tags = tags(TAGS);
    for n in [2, 3, 4, 8] {
        let ring = Ring::new(&names(n));
        let mut counts = vec![0usize; n];
        for tag in &tags {
            counts[ring.node(tag)] += 1;
        }
        let ideal = TAGS as f64 / n as f64;
        let shares: Vec<String> = counts
            .iter()
            .map(|&c| format!("{:.1} %", c as f64 * 100.0 / TAGS as f64))
            .collect();
        eprintln!("{n} nodes: {}", shares.join(", "));
        for c in counts {
            assert!(
                (c as f64 - ideal).abs() <= ideal * 0.15,
                "{n} nodes: {c} vs {ideal}"
            );
        }
    }
}

#[test]
fn the_order_of_nodes_in_the_url_does_not_matter() {
    let tags = tags(10_000);
    let forward = names(5);
    let mut backward = forward.clone();
    backward.reverse();
    let (a, b) = (Ring::new(&forward), Ring::new(&backward));
    for tag in &tags {
        assert_eq!(forward[a.node(tag)], backward[b.node(tag)]);
    }
}
