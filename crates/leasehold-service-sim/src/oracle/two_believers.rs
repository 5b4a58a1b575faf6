//! Invariant: never two believers of one key across services.
//!
//! Believers are service incarnations ([`Owner`]): two incarnations of one slot count as two
//! (the older one is shut down or dropped and must believe nothing). One sweep over all signals
//! is not atomic, so a hand-over during the sweep could look like an overlap: a pair is reported
//! only when a second sweep, in the exact reverse order, shows both again. A false report would
//! then need two hand-overs of the key, back and forth, within the two sweeps (microseconds).

use std::collections::{BTreeMap, BTreeSet};

use leasehold::LeaseKey;

use super::Finding;
use crate::beliefs::{Owner, Sighting, Signal};

/// Keys believed by more than one owner in `sweep`, with the owners and one signal each.
fn believers(sweep: &[Sighting]) -> BTreeMap<&LeaseKey, BTreeMap<&Owner, Signal>> {
    let mut by_key: BTreeMap<&LeaseKey, BTreeMap<&Owner, Signal>> = BTreeMap::new();
    for s in sweep {
        by_key
            .entry(&s.key)
            .or_default()
            .entry(&s.owner)
            .or_insert(s.signal);
    }
    by_key.retain(|_, owners| owners.len() > 1);
    by_key
}

/// Whether the first sweep shows a candidate at all (then the caller takes the second sweep).
pub(crate) fn suspected(first: &[Sighting]) -> bool {
    !believers(first).is_empty()
}

/// The overlaps present in both sweeps.
pub(crate) fn check(first: &[Sighting], second: &[Sighting]) -> Vec<Finding> {
    let again = believers(second);
    let mut found = Vec::new();
    for (key, owners) in believers(first) {
        let Some(still) = again.get(key) else {
            continue;
        };
        let both: BTreeSet<&&Owner> = owners.keys().filter(|o| still.contains_key(**o)).collect();
        if both.len() < 2 {
            continue;
        }
        let list: Vec<String> = both
            .iter()
            .map(|o| format!("{o} via {:?}", owners[**o]))
            .collect();
        let first_owner = both.iter().next().map(|o| (**o).clone());
        found.push(Finding {
            invariant: super::Invariant::TwoBelievers,
            key: Some(key.clone()),
            signal: first_owner.as_ref().map(|o| owners[o]),
            owner: first_owner,
            dedupe: format!("{key} {}", list.join(" + ")),
            detail: format!("{key} believed at once by {}", list.join(" and ")),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use leasehold::{HolderId, LeaseKey};

    use super::{check, suspected};
    use crate::beliefs::{Owner, Sighting, Signal};

    fn seen(slot: usize, name: &str) -> Sighting {
        Sighting {
            owner: Owner {
                slot,
                generation: 1,
                holder: HolderId::new(format!("h{slot}")).expect("holder"),
            },
            key: LeaseKey::parse("ns", name).expect("key"),
            signal: Signal::HasLease,
            token: None,
        }
    }

    #[test]
    fn an_overlap_seen_in_both_sweeps_is_reported() {
        let first = vec![seen(0, "k"), seen(1, "k"), seen(1, "j")];
        assert!(suspected(&first));
        let second = vec![seen(1, "k"), seen(0, "k")];
        assert_eq!(check(&first, &second).len(), 1);
    }

    #[test]
    fn a_hand_over_during_the_sweep_is_not() {
        let first = vec![seen(0, "k"), seen(1, "k")];
        // By the reverse sweep the first believer had let go.
        assert!(check(&first, &[seen(1, "k")]).is_empty());
        // One service through two signals is one believer.
        let mut same = seen(0, "k");
        same.signal = Signal::TaskToken;
        assert!(!suspected(&[seen(0, "k"), same]));
    }
}
