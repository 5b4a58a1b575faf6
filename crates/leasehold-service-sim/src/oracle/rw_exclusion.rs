//! Invariant: a read-write lock's writer is never believed beside anyone else on that lock,
//! reader or writer.
//!
//! A writer believes the lock's gate `{name}#rw`, a reader one of its read slots
//! `{name}#read#permit:{i}/{n}`: [`super::two_believers`] checks each of those keys alone (two
//! writers of one gate, two readers of one slot); this puts the keys of one lock together. A
//! believer is an (owner, key) pair, so a service believing a writer and a reader of one lock
//! at once (a writer asked for while its own reader is in) counts as two. Like two believers, a
//! writer beside another believer is reported only when the reverse sweep shows the same pairs
//! again.

use std::collections::{BTreeMap, BTreeSet};

use leasehold::LeaseKey;
use leasehold::derived::{DerivedKey, KeyRole};

use super::Finding;
use crate::beliefs::{Owner, Sighting};

/// The read-write lock of a key and whether the key is its writer's: (namespace, name, writer).
fn rw_lock(key: &LeaseKey) -> Option<(String, String, bool)> {
    let derived = DerivedKey::parse(key.name.as_str())?;
    let writer = match derived.role {
        KeyRole::RwGate if derived.rest.is_empty() => true,
        KeyRole::RwReaders if derived.permit().is_some() => false,
        _ => return None,
    };
    let ns = key.namespace.as_str().to_owned();
    Some((ns, derived.base.to_owned(), writer))
}

type Pairs<'a> = BTreeMap<(String, String), BTreeSet<(&'a Owner, &'a LeaseKey, bool)>>;

/// The locks of `sweep` with a writer beside another believer.
fn crowded(sweep: &[Sighting]) -> Pairs<'_> {
    let mut by_lock: Pairs<'_> = BTreeMap::new();
    for s in sweep {
        if let Some((ns, name, writer)) = rw_lock(&s.key) {
            by_lock
                .entry((ns, name))
                .or_default()
                .insert((&s.owner, &s.key, writer));
        }
    }
    by_lock.retain(|_, pairs| pairs.len() > 1 && pairs.iter().any(|(_, _, w)| *w));
    by_lock
}

/// Whether the first sweep shows a candidate (then the caller takes the second sweep).
pub(crate) fn suspected(first: &[Sighting]) -> bool {
    !crowded(first).is_empty()
}

/// The locks with a writer beside another believer in both sweeps.
pub(crate) fn check(first: &[Sighting], second: &[Sighting]) -> Vec<Finding> {
    let again = crowded(second);
    let mut found = Vec::new();
    for (lock, pairs) in crowded(first) {
        let Some(still) = again.get(&lock) else {
            continue;
        };
        let both: Vec<_> = pairs.intersection(still).collect();
        if both.len() < 2 || !both.iter().any(|(_, _, w)| *w) {
            continue;
        }
        let list: Vec<String> = both
            .iter()
            .map(|(o, k, w)| {
                let role = if *w { "writer" } else { "reader" };
                format!("{o} as {role} on {k}")
            })
            .collect();
        let writer = both.iter().find(|(_, _, w)| *w).unwrap_or(&both[0]);
        let (ns, name) = &lock;
        found.push(Finding {
            invariant: super::Invariant::WriterBesideOthers,
            key: Some(writer.1.clone()),
            owner: Some(writer.0.clone()),
            signal: None,
            dedupe: format!("{ns}/{name} {}", list.join(" + ")),
            detail: format!(
                "the read-write lock {ns}/{name} has a writer beside others: {}",
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

    /// The gate of read-write lock `name`: its writer's key.
    fn gate(name: &str) -> LeaseKey {
        DerivedKey::rw_gate(&plain(name)).expect("gate key")
    }

    /// Read slot `i` of read-write lock `name`: a reader's key.
    fn reader(name: &str, i: u32) -> LeaseKey {
        let readers = DerivedKey::rw_readers(&plain(name)).expect("readers key");
        DerivedKey::permit(&readers, i, 1024).expect("read slot key")
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
    fn a_writer_beside_a_reader_is_reported() {
        let first = vec![seen(0, gate("k")), seen(1, reader("k", 7))];
        assert!(suspected(&first));
        assert_eq!(check(&first, &first).len(), 1);
        // One service as writer and reader of its own lock is two believers too.
        let own = vec![seen(0, gate("k")), seen(0, reader("k", 7))];
        assert_eq!(check(&own, &own).len(), 1);
    }

    #[test]
    fn readers_together_and_other_locks_are_not() {
        let first = vec![
            seen(0, reader("k", 1)),
            seen(1, reader("k", 2)),
            seen(2, gate("j")),
            seen(2, plain("k")),
        ];
        assert!(!suspected(&first));
        // One writer through two signals is one believer.
        let mut again = seen(0, gate("k"));
        again.signal = Signal::TaskToken;
        assert!(!suspected(&[seen(0, gate("k")), again]));
    }

    #[test]
    fn a_pair_gone_in_the_second_sweep_is_not() {
        let first = vec![seen(0, gate("k")), seen(1, reader("k", 7))];
        let second = vec![seen(0, gate("k"))];
        assert!(check(&first, &second).is_empty());
    }
}
