//! The registry that answers `has_lease` from memory.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use dashmap::DashMap;
use leasehold_core::{Clock, LeaseKey};
use tokio::time::Instant;

/// The local deadline of every lease held by this process, keyed by lease.
///
/// [`LeaseActor`](crate::LeaseActor)s write it on every grant, renewal and loss
/// ([`Command::SetDeadline`](leasehold_core::Command::SetDeadline)); [`Registry::has_lease`]
/// reads it with one map lookup and one monotonic clock read: no IO, no actor round trip. A
/// deadline is a point in time, so the answer turns false at the deadline even if the actor that
/// should have renewed is stuck.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_actor::Registry;
/// use leasehold_core::{Clock, LeaseKey, ManualClock};
///
/// let clock = ManualClock::starting_now();
/// let registry = Registry::new(Arc::new(clock.clone()));
/// let key = LeaseKey::parse("", "leader")?;
/// registry.set(&key, Some(clock.now() + Duration::from_secs(5)));
/// assert!(registry.has_lease(&key));
/// clock.advance(Duration::from_secs(5));
/// assert!(!registry.has_lease(&key));
/// # Ok::<(), leasehold_core::ValidationError>(())
/// ```
pub struct Registry {
    deadlines: DashMap<LeaseKey, Instant>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("leases", &self.deadlines.len())
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            deadlines: DashMap::new(),
            clock,
        }
    }

    /// Whether `key` is held now: a deadline is recorded and the clock is before it.
    #[must_use]
    pub fn has_lease(&self, key: &LeaseKey) -> bool {
        match self.deadlines.get(key) {
            Some(deadline) => self.clock.now() < *deadline,
            None => false,
        }
    }

    /// Like [`Registry::has_lease`], for a key given as its two parts, without building a
    /// [`LeaseKey`] (no allocation).
    #[must_use]
    pub fn has_lease_str(&self, namespace: &str, name: &str) -> bool {
        let view: &dyn KeyView = &(namespace, name);
        match self.deadlines.get(view) {
            Some(deadline) => self.clock.now() < *deadline,
            None => false,
        }
    }

    /// The local deadline recorded for `key`, if any (it may have passed).
    #[must_use]
    pub fn deadline(&self, key: &LeaseKey) -> Option<Instant> {
        self.deadlines.get(key).map(|d| *d)
    }

    /// Records (`Some`) or clears (`None`) the local deadline of `key`.
    pub fn set(&self, key: &LeaseKey, deadline: Option<Instant>) {
        match deadline {
            Some(d) => {
                self.deadlines.insert(key.clone(), d);
            }
            None => {
                self.deadlines.remove(key);
            }
        }
    }

    /// Clears every deadline: nothing is held from now on.
    pub fn clear(&self) {
        self.deadlines.clear();
    }

    /// The keys with a deadline still in the future.
    #[must_use]
    pub fn held(&self) -> Vec<LeaseKey> {
        let now = self.clock.now();
        self.deadlines
            .iter()
            .filter(|e| now < *e.value())
            .map(|e| e.key().clone())
            .collect()
    }

    /// The clock deadlines are compared with.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

/// A lease key seen as its two parts, so the map can be searched with borrowed strings.
///
/// Hashes exactly like the derived `Hash` of [`LeaseKey`] (namespace string, then name string),
/// which `Borrow` requires.
trait KeyView {
    fn parts(&self) -> (&str, &str);
}

impl KeyView for LeaseKey {
    fn parts(&self) -> (&str, &str) {
        (self.namespace.as_str(), self.name.as_str())
    }
}

impl KeyView for (&str, &str) {
    fn parts(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn KeyView + 'a> for LeaseKey {
    fn borrow(&self) -> &(dyn KeyView + 'a) {
        self
    }
}

impl Hash for dyn KeyView + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        let (namespace, name) = self.parts();
        namespace.hash(state);
        name.hash(state);
    }
}

impl PartialEq for dyn KeyView + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.parts() == other.parts()
    }
}

impl Eq for dyn KeyView + '_ {}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::ManualClock;
    use std::time::Duration;

    #[test]
    fn borrowed_lookup_finds_owned_keys() {
        let clock = ManualClock::starting_now();
        let registry = Registry::new(Arc::new(clock.clone()));
        let key = LeaseKey::parse("ns", "name").expect("valid");
        registry.set(&key, Some(clock.now() + Duration::from_secs(1)));
        assert!(registry.has_lease_str("ns", "name"));
        assert!(!registry.has_lease_str("n", "sname"));
        assert!(!registry.has_lease_str("", "name"));
        let plain = LeaseKey::parse("", "x").expect("valid");
        registry.set(&plain, Some(clock.now() + Duration::from_secs(1)));
        assert!(registry.has_lease_str("", "x"));
        clock.advance(Duration::from_secs(1));
        assert!(!registry.has_lease_str("ns", "name"));
    }
}
