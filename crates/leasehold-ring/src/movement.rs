//! Which names change owner between two rings.

use crate::HostRing;

/// A name whose owner differs between two rings.
///
/// # Examples
/// ```
/// use leasehold_ring::{HostRing, Move, moved};
///
/// let old = HostRing::from_hosts(["host-a"]);
/// let new = HostRing::from_hosts(["host-b"]);
/// assert_eq!(
///     moved(&old, &new, ["task-1"]),
///     [Move { name: "task-1", from: Some("host-a"), to: Some("host-b") }]
/// );
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Move<'a> {
    /// The name.
    pub name: &'a str,
    /// Its owner on the old ring, `None` if the old ring was empty.
    pub from: Option<&'a str>,
    /// Its owner on the new ring, `None` if the new ring is empty.
    pub to: Option<&'a str>,
}

/// The names among `names` whose owner on `new` differs from their owner on `old`, in the order
/// of `names`.
///
/// A host uses this when the live set changes: names moved away from it are released so their
/// new owner can take them; names moved to it are ones it now competes for.
///
/// # Examples
/// ```
/// use leasehold_ring::{HostRing, moved};
///
/// let old = HostRing::from_hosts(["host-a", "host-b", "host-c"]);
/// let mut new = old.clone();
/// new.add("host-d");
/// let names: Vec<String> = (0..1_000).map(|i| format!("task-{i}")).collect();
/// let moves = moved(&old, &new, names.iter().map(String::as_str));
/// // Adding a host moves names only to it, about a quarter of them here.
/// assert!(moves.iter().all(|m| m.to == Some("host-d")));
/// assert!((150..350).contains(&moves.len()));
/// ```
#[must_use]
pub fn moved<'a, I>(old: &'a HostRing, new: &'a HostRing, names: I) -> Vec<Move<'a>>
where
    I: IntoIterator<Item = &'a str>,
{
    names
        .into_iter()
        .filter_map(|name| {
            let from = old.owner(name);
            let to = new.owner(name);
            (from != to).then_some(Move { name, from, to })
        })
        .collect()
}
