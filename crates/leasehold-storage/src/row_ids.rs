//! MySQL: the row ids of the leases this store renewed lately, so that a batched renewal locks
//! its rows by primary key instead of by name.
//!
//! On MariaDB 10.11 a chunk of 5,000 names locked `FOR UPDATE SKIP LOCKED` through the
//! `(namespace, lease_name)` index takes 55–60 ms on the server; the same rows by `id IN (…)`
//! 19–26 ms (by hand, `SET profiling = 1`, 100,000 rows). An id is only a hint: the read by id
//! keeps the statement's namespace, holder and status conditions, and a row is taken for an item
//! only if its name is the item's, so a stale id (a purged row, a name granted anew under
//! another id) just sends the item to the read by name, which records the id it finds.
//!
//! Small and bounded: a lease's entry is a 64-bit hash of its namespace and name and the id (a
//! collision only makes a wrong hint, which the checks above turn away), and ids live for two
//! generations: a generation ends when it is older than twice the term of the renewal that looks
//! it up, so an id no renewal used for that long is forgotten (a lease still held is renewed at
//! least once per term).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use leasehold_core::{Clock, MonotonicClock};

/// Shortest generation (terms are at least this long in practice; a floor keeps a tiny test
/// term from turning the cache over on every renewal).
const MIN_GENERATION: Duration = Duration::from_secs(2);

/// Ids by the hash of (namespace, name).
type Ids = HashMap<u64, i64>;

fn key(ns: &str, name: &str) -> u64 {
    let mut h = DefaultHasher::new();
    (ns, name).hash(&mut h);
    h.finish()
}

#[derive(Debug, Default)]
struct Generations {
    current: Ids,
    previous: Ids,
    started: Option<Instant>,
}

/// Row ids by (namespace, lease name); shared by the clones of a store.
#[derive(Debug, Default)]
pub(crate) struct RowIds {
    inner: Mutex<Generations>,
}

impl RowIds {
    /// The ids known for `keys` (namespace, name), with the index of each key; turns the
    /// generation over first if it is older than twice `term`.
    pub(crate) fn lookup<'a>(
        &self,
        keys: impl Iterator<Item = (usize, &'a str, &'a str)>,
        term: Duration,
    ) -> Vec<(usize, i64)> {
        let Ok(mut g) = self.inner.lock() else {
            return Vec::new();
        };
        let now = MonotonicClock.now();
        let span = (term * 2).max(MIN_GENERATION);
        match g.started {
            Some(at) if now.saturating_duration_since(at) < span => {}
            _ => {
                let current = std::mem::take(&mut g.current);
                g.previous = current;
                g.started = Some(now);
            }
        }
        let mut out = Vec::new();
        for (i, ns, name) in keys {
            let k = key(ns, name);
            if let Some(&id) = g.current.get(&k) {
                out.push((i, id));
            } else if let Some(id) = g.previous.remove(&k) {
                g.current.insert(k, id);
                out.push((i, id));
            }
        }
        out
    }

    /// Records the ids a renewal found.
    pub(crate) fn record<'a>(&self, found: impl Iterator<Item = (&'a str, &'a str, i64)>) {
        if let Ok(mut g) = self.inner.lock() {
            for (ns, name, id) in found {
                g.current.insert(key(ns, name), id);
            }
        }
    }

    /// Ids held, for tests.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner
            .lock()
            .map_or(0, |g| g.current.len() + g.previous.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_unused_for_two_generations_is_forgotten() {
        let ids = RowIds::default();
        let term = Duration::from_millis(1);
        ids.record([("ns", "a", 7)].into_iter());
        assert_eq!(ids.lookup([(0, "ns", "a")].into_iter(), term), vec![(0, 7)]);
        // Each lookup after MIN_GENERATION turns the generation over.
        std::thread::sleep(MIN_GENERATION);
        assert_eq!(ids.lookup([(3, "ns", "b")].into_iter(), term), vec![]);
        assert_eq!(ids.len(), 1, "a moves to the previous generation");
        std::thread::sleep(MIN_GENERATION);
        assert_eq!(ids.lookup([(0, "ns", "b")].into_iter(), term), vec![]);
        assert_eq!(ids.len(), 0, "two generations unused: forgotten");
    }

    #[test]
    fn an_id_used_moves_to_the_current_generation() {
        let ids = RowIds::default();
        let term = Duration::from_millis(1);
        ids.record([("ns", "a", 7)].into_iter());
        std::thread::sleep(MIN_GENERATION);
        assert_eq!(ids.lookup([(1, "ns", "a")].into_iter(), term), vec![(1, 7)]);
        std::thread::sleep(MIN_GENERATION);
        assert_eq!(ids.lookup([(1, "ns", "a")].into_iter(), term), vec![(1, 7)]);
    }
}
