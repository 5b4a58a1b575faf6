//! The sharding decision, apart from IO: from the live hosts, the names, the ring and this
//! host to what the coordinator must do. Unit-tested like the lease machine; the coordinator
//! (`coordinator.rs`) only executes a plan.

use std::collections::{BTreeMap, BTreeSet};

use leasehold_core::LeaseName;
use leasehold_ring::HostRing;

/// What one round must do, in this order: `switch` first (a name moving away is released as
/// early as possible), then `start`, then `stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Running names to switch: `true` to compete, `false` to stand by (releasing if held).
    pub(crate) switch: Vec<(LeaseName, bool)>,
    /// New names to start, competing (`true`) or in standby.
    pub(crate) start: Vec<(LeaseName, bool)>,
    /// Running names no longer listed: stop them (releasing what is held).
    pub(crate) stop: Vec<LeaseName>,
}

/// The plan for `me` given the live `hosts` (by the database's clock, this host included only
/// while its own membership is believed: `self_live`), the `names` wanted now and the names
/// `running` with whether each competes. A host whose membership is not live competes for
/// nothing.
pub(crate) fn plan(
    me: &str,
    self_live: bool,
    hosts: &BTreeSet<String>,
    names: &BTreeSet<LeaseName>,
    running: &BTreeMap<LeaseName, bool>,
) -> Plan {
    let ring = HostRing::from_hosts(hosts.iter());
    let wanted = |name: &LeaseName| self_live && ring.is_owner(me, name.as_str());
    Plan {
        switch: running
            .iter()
            .filter(|(n, competing)| names.contains(*n) && wanted(n) != **competing)
            .map(|(n, competing)| (n.clone(), !*competing))
            .collect(),
        start: names
            .iter()
            .filter(|n| !running.contains_key(*n))
            .map(|n| (n.clone(), wanted(n)))
            .collect(),
        stop: running
            .keys()
            .filter(|n| !names.contains(*n))
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<LeaseName> {
        list.iter()
            .map(|n| LeaseName::new(*n).expect("name"))
            .collect()
    }

    fn hosts(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|h| (*h).to_owned()).collect()
    }

    fn name(n: &str) -> LeaseName {
        LeaseName::new(n).expect("name")
    }

    #[test]
    fn alone_a_host_starts_every_name_competing() {
        let all = names(&["a", "b", "c"]);
        let p = plan("h1", true, &hosts(&["h1"]), &all, &BTreeMap::new());
        assert_eq!(
            p.start,
            vec![(name("a"), true), (name("b"), true), (name("c"), true)]
        );
        assert!(p.switch.is_empty() && p.stop.is_empty());
    }

    #[test]
    fn without_a_live_membership_a_host_competes_for_nothing() {
        let all = names(&["a", "b"]);
        let running: BTreeMap<_, _> = [(name("a"), true)].into();
        let p = plan("h1", false, &BTreeSet::new(), &all, &running);
        assert_eq!(
            p.switch,
            vec![(name("a"), false)],
            "stand by what it competed for"
        );
        assert_eq!(p.start, vec![(name("b"), false)]);
    }

    #[test]
    fn a_joining_host_takes_only_its_share_and_removed_names_stop() {
        let all = names(
            &(0..40)
                .map(|i| format!("n{i}"))
                .collect::<Vec<_>>()
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        );
        let alone = plan("h1", true, &hosts(&["h1"]), &all, &BTreeMap::new());
        let running: BTreeMap<_, _> = alone.start.into_iter().collect();
        let two = hosts(&["h1", "h2"]);
        let ring = HostRing::from_hosts(two.iter());
        let p = plan("h1", true, &two, &all, &running);
        // Exactly the names the ring now gives h2 stand by here; nothing else moves.
        for (n, compete) in &p.switch {
            assert!(
                !compete && ring.is_owner("h2", n.as_str()),
                "{n} moved wrongly"
            );
        }
        let moved = all
            .iter()
            .filter(|n| ring.is_owner("h2", n.as_str()))
            .count();
        assert_eq!(p.switch.len(), moved);
        assert!(moved > 0 && moved < all.len());
        // A name dropped from the list is stopped; one still listed is not.
        let fewer: BTreeSet<_> = all.iter().skip(1).cloned().collect();
        let p = plan("h1", true, &two, &fewer, &running);
        assert_eq!(p.stop, vec![name("n0")]);
    }

    #[test]
    fn a_stable_ring_plans_nothing() {
        let all = names(&["a", "b", "c"]);
        let two = hosts(&["h1", "h2"]);
        let first = plan("h1", true, &two, &all, &BTreeMap::new());
        let running: BTreeMap<_, _> = first.start.into_iter().collect();
        assert_eq!(plan("h1", true, &two, &all, &running), Plan::default());
    }
}
