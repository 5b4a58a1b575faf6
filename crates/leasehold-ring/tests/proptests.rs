//! Property tests for the ring: balance, minimal movement, determinism, weights.
//!
//! Each case builds rings of ~1,600 points and looks up 10,000 names, so case counts stay small.
//!
//! The balance bound is set from measurement, not hope: over 1,000 random sets of 10 hosts with
//! 160 virtual nodes and 10,000 names, max/mean had median 1.13, p90 1.20, p99 1.26, worst 1.36
//! (a host's share is a sum of 160 arcs, relative spread about 1/sqrt(160) = 8%). A bound of 1.15
//! would fail about one case in three; 1.45 is about five standard deviations out.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use leasehold_ring::{HostRing, moved};
use proptest::prelude::*;

const NAMES: usize = 10_000;
const BALANCE_BOUND: f64 = 1.45;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 16,
        ..ProptestConfig::default()
    }
}

/// A host id shaped like a real holder id: `hostname:pid:random`.
fn holder_id() -> impl Strategy<Value = String> {
    ("[a-z][a-z0-9-]{0,11}", 1u32..65_536, "[0-9a-f]{4,8}")
        .prop_map(|(host, pid, nonce)| format!("{host}:{pid}:{nonce}"))
}

/// `count` distinct holder ids, in no particular order.
fn hosts(count: std::ops::RangeInclusive<usize>) -> impl Strategy<Value = Vec<String>> {
    prop::collection::btree_set(holder_id(), count)
        .prop_map(|set| set.into_iter().collect())
        .prop_shuffle()
}

/// 10,000 distinct task names under a random prefix.
fn names() -> impl Strategy<Value = Vec<String>> {
    "[a-z]{1,6}(/[a-z]{1,6})?"
        .prop_map(|prefix| (0..NAMES).map(|i| format!("{prefix}/{i}")).collect())
}

fn strs(names: &[String]) -> impl Iterator<Item = &str> {
    names.iter().map(String::as_str)
}

fn owners<'a>(ring: &'a HostRing, names: &[String]) -> Vec<Option<&'a str>> {
    names.iter().map(|name| ring.owner(name)).collect()
}

fn max_over_mean(ring: &HostRing, names: &[String]) -> f64 {
    let by_host = ring.assignments(strs(names));
    let max = by_host.values().map(Vec::len).max().unwrap_or(0);
    max as f64 * by_host.len() as f64 / names.len() as f64
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn ten_hosts_share_names_evenly(hosts in hosts(10..=10), names in names()) {
        let ring = HostRing::from_hosts(&hosts);
        let ratio = max_over_mean(&ring, &names);
        prop_assert!(ratio <= BALANCE_BOUND, "max/mean {ratio:.3} for hosts {hosts:?}");
        // Every host gets a real share too: none starves.
        let by_host = ring.assignments(strs(&names));
        let min = by_host.values().map(Vec::len).min().unwrap();
        prop_assert!(min as f64 >= 0.55 * (NAMES / 10) as f64, "a host owns only {min} names");
    }

    #[test]
    fn adding_a_host_moves_about_one_nth_and_only_to_it(
        hosts in hosts(2..=13),
        names in names(),
    ) {
        let (joiner, before) = hosts.split_last().unwrap();
        let old = HostRing::from_hosts(before);
        let mut new = old.clone();
        prop_assert!(new.add(joiner));
        let moves = moved(&old, &new, strs(&names));
        prop_assert!(moves.iter().all(|m| m.to == Some(joiner.as_str())));
        // Every name the joiner now owns came to it; nothing else moved.
        let owned_by_joiner = names.iter().filter(|name| new.is_owner(joiner, name)).count();
        prop_assert_eq!(moves.len(), owned_by_joiner);
        let n = hosts.len() as f64;
        let fraction = moves.len() as f64 / names.len() as f64;
        prop_assert!(
            (0.5 / n..=1.6 / n).contains(&fraction),
            "{fraction:.4} of names moved going to {n} hosts"
        );
    }

    #[test]
    fn removing_a_host_moves_only_its_names(
        hosts in hosts(2..=12),
        leaver in any::<prop::sample::Index>(),
        names in names(),
    ) {
        let leaver = leaver.get(&hosts).as_str();
        let old = HostRing::from_hosts(&hosts);
        let mut new = old.clone();
        prop_assert!(new.remove(leaver));
        let moves = moved(&old, &new, strs(&names));
        prop_assert!(moves.iter().all(|m| m.from == Some(leaver) && m.to.is_some_and(|to| to != leaver)));
        let owned_by_leaver = names.iter().filter(|name| old.is_owner(leaver, name)).count();
        prop_assert_eq!(moves.len(), owned_by_leaver);
        // Removing the host it just added gives back the original ring.
        new.add(leaver);
        prop_assert_eq!(owners(&new, &names), owners(&old, &names));
    }

    #[test]
    fn same_live_set_in_any_order_gives_same_owners(
        hosts in hosts(1..=12),
        shuffled_seed in any::<prop::sample::Index>(),
        names in names(),
    ) {
        let reference = HostRing::from_hosts(&hosts);
        // Another order of the same set, with duplicates, and built one host at a time.
        let mut reordered = hosts.clone();
        reordered.rotate_left(shuffled_seed.index(hosts.len()));
        reordered.reverse();
        let mut incremental = HostRing::from_hosts(Vec::<String>::new());
        for host in reordered.iter().chain(&hosts) {
            incremental.add(host);
        }
        prop_assert_eq!(&incremental, &reference);
        prop_assert_eq!(owners(&incremental, &names), owners(&reference, &names));
        // The assignment also survives a detour through a host that joined and left.
        incremental.add("host-temporary:1:0000");
        incremental.remove("host-temporary:1:0000");
        prop_assert_eq!(owners(&incremental, &names), owners(&reference, &names));
    }

    #[test]
    fn a_weight_two_host_takes_about_twice_the_share(
        hosts in hosts(3..=8),
        names in names(),
    ) {
        let (heavy, light) = hosts.split_last().unwrap();
        let mut ring = HostRing::from_hosts(light);
        ring.add_weighted(heavy, 2).unwrap();
        let by_host = ring.assignments(strs(&names));
        let heavy_share = by_host[heavy.as_str()].len() as f64 / names.len() as f64;
        let expected = 2.0 / (light.len() as f64 + 2.0);
        prop_assert!(
            (0.7 * expected..=1.35 * expected).contains(&heavy_share),
            "weight-2 host owns {heavy_share:.3}, expected about {expected:.3}"
        );
    }

    #[test]
    fn changing_a_weight_moves_names_only_to_or_from_that_host(
        hosts in hosts(2..=8),
        weight in 2u32..=4,
        names in names(),
    ) {
        let host = hosts[0].as_str();
        let light = HostRing::from_hosts(&hosts);
        let mut heavy = light.clone();
        heavy.add_weighted(host, weight).unwrap();
        prop_assert!(moved(&light, &heavy, strs(&names)).iter().all(|m| m.to == Some(host)));
        prop_assert!(moved(&heavy, &light, strs(&names)).iter().all(|m| m.from == Some(host)));
    }
}

/// A deterministic check on the typical balance (no sampling, so no flakes): over 40 fixed sets
/// of 10 holder-id-shaped hosts, the median max/mean stays near the expected 1.13.
#[test]
fn typical_balance_over_fixed_host_sets() {
    let names: Vec<String> = (0..NAMES).map(|i| format!("task-{i}")).collect();
    let mut ratios: Vec<f64> = (0..40)
        .map(|set| {
            let hosts: BTreeSet<String> = (0..10)
                .map(|i| format!("node-{set}-{i}:{}:{:04x}", 1000 + i, set * 31 + i))
                .collect();
            max_over_mean(&HostRing::from_hosts(&hosts), &names)
        })
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(
        median <= 1.18,
        "median max/mean {median:.3}; sorted: {ratios:?}"
    );
}

/// The seed's bug, for contrast: one point per host. A ring with one virtual node per host is
/// far from even, which is why virtual nodes exist.
#[test]
fn one_point_per_host_is_uneven() {
    use leasehold_ring::RingConfig;
    let names: Vec<String> = (0..NAMES).map(|i| format!("task-{i}")).collect();
    let hosts: Vec<String> = (0..10).map(|i| format!("host-{i}")).collect();
    let ring = HostRing::with_hosts(RingConfig::default().with_virtual_nodes(1), &hosts).unwrap();
    let spread: BTreeMap<&str, usize> = ring
        .assignments(strs(&names))
        .into_iter()
        .map(|(h, v)| (h, v.len()))
        .collect();
    assert!(max_over_mean(&ring, &names) > 1.5, "{spread:?}");
}
