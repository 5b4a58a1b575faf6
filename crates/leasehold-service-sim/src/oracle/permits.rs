//! Invariant: a semaphore with `N` permits has at most `N` believers at once.
//!
//! A permit is the lock `{name}#permit:{i}/{N}`: [`super::two_believers`] already checks each
//! permit alone; this counts the believed permits of each semaphore together, (owner, permit)
//! pairs, so one service holding two permits counts twice. Like two believers, a count over `N`
//! is reported only when the reverse sweep shows the same pairs again.

use std::collections::{BTreeMap, BTreeSet};

use leasehold::LeaseKey;
use leasehold::derived::{DerivedKey, KeyRole};

use super::Finding;
use crate::beliefs::{Owner, Sighting};

/// The semaphore of a permit's key: (namespace, base name, N).
fn semaphore(key: &LeaseKey) -> Option<(String, String, u32)> {
    let derived = DerivedKey::parse(key.name.as_str())?;
    let (_, n) = derived.permit()?;
    // A read-write lock's read slots are permits of its semaphore `{name}#read`.
    let base = match derived.role {
        KeyRole::RwReaders => format!("{}{}", derived.base, derived.role.form()),
        _ => derived.base.to_owned(),
    };
    Some((key.namespace.as_str().to_owned(), base, n))
}

type Pairs<'a> = BTreeMap<(String, String, u32), BTreeSet<(&'a Owner, &'a LeaseKey)>>;

/// The semaphores believed by more than `N` (owner, permit) pairs in `sweep`.
fn over(sweep: &[Sighting]) -> Pairs<'_> {
    let mut by_sem: Pairs<'_> = BTreeMap::new();
    for s in sweep {
        if let Some(sem) = semaphore(&s.key) {
            by_sem.entry(sem).or_default().insert((&s.owner, &s.key));
        }
    }
    by_sem.retain(|(_, _, n), pairs| pairs.len() > *n as usize);
    by_sem
}

/// Whether the first sweep shows a candidate (then the caller takes the second sweep).
pub(crate) fn suspected(first: &[Sighting]) -> bool {
    !over(first).is_empty()
}

/// The semaphores over their count in both sweeps.
pub(crate) fn check(first: &[Sighting], second: &[Sighting]) -> Vec<Finding> {
    let again = over(second);
    let mut found = Vec::new();
    for (sem, pairs) in over(first) {
        let Some(still) = again.get(&sem) else {
            continue;
        };
        let both: Vec<_> = pairs.intersection(still).collect();
        let (ns, base, n) = &sem;
        if both.len() <= *n as usize {
            continue;
        }
        let list: Vec<String> = both.iter().map(|(o, k)| format!("{o} on {k}")).collect();
        found.push(Finding {
            invariant: super::Invariant::TooManyPermits,
            key: both.first().map(|(_, k)| (*k).clone()),
            owner: both.first().map(|(o, _)| (*o).clone()),
            signal: None,
            dedupe: format!("{ns}/{base} {}", list.join(" + ")),
            detail: format!(
                "{ns}/{base} ({n} permits) believed {} times at once: {}",
                both.len(),
                list.join(", ")
            ),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use leasehold::derived::DerivedKey;
    use leasehold::{HolderId, LeaseKey};

    use super::{check, suspected};
    use crate::beliefs::{Owner, Sighting, Signal};

    fn plain(name: &str) -> LeaseKey {
        LeaseKey::parse("ns", name).expect("key")
    }

    /// Permit `i` of semaphore `s` with 2 permits.
    fn permit(i: u32) -> LeaseKey {
        DerivedKey::permit(&plain("s"), i, 2).expect("permit key")
    }

    fn seen(slot: usize, key: LeaseKey) -> Sighting {
        Sighting {
            owner: Owner {
                slot,
                generation: 1,
                holder: HolderId::new(format!("h{slot}")).expect("holder"),
            },
            key,
            signal: Signal::GuardIsHeld,
            token: None,
        }
    }

    #[test]
    fn more_believers_than_permits_is_reported() {
        let first = vec![seen(0, permit(0)), seen(1, permit(1)), seen(2, permit(1))];
        assert!(suspected(&first));
        assert_eq!(check(&first, &first).len(), 1);
    }

    #[test]
    fn n_believers_and_other_names_are_not() {
        let first = vec![seen(0, permit(0)), seen(0, permit(1)), seen(1, plain("k"))];
        assert!(!suspected(&first));
        // One service through two signals on one permit is one pair.
        let mut again = seen(0, permit(0));
        again.signal = Signal::TaskToken;
        assert!(!suspected(&[seen(0, permit(0)), again]));
    }
}
