//! The registry that answers `has_lease` from memory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use dashmap::DashMap;
use leasehold_core::{Clock, LeaseKey, LeaseName, Namespace};
use tokio::time::Instant;

/// The hasher of the registry's maps: foldhash, a few nanoseconds for a short name where the
/// standard SipHash takes about twenty. The maps hold no attacker-chosen keys beyond the lease
/// names the application itself starts, and foldhash is seeded per process.
type FastHash = foldhash::fast::RandomState;

/// The local deadline of every lease held by this process, keyed by lease.
///
/// [`LeaseActor`](crate::LeaseActor)s write it on every grant, renewal and loss
/// ([`Command::BeginTenure`](leasehold_core::Command::BeginTenure),
/// [`Command::RenewTenure`](leasehold_core::Command::RenewTenure),
/// [`Command::EndTenure`](leasehold_core::Command::EndTenure)); [`Registry::has_lease`]
/// reads it with one map lookup and one monotonic clock read: no IO, no actor round trip. A
/// deadline is a point in time, so the answer turns false at the deadline even if the actor that
/// should have renewed is stuck.
///
/// Deadlines are kept per namespace, in a map keyed by the lease name alone; a caller that always
/// asks about one namespace (a `LeaseService`) keeps that namespace's [`NamespaceDeadlines`] and
/// skips the namespace lookup: one hash of the name, one shard read lock, one clock read.
///
/// # Examples
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_engine::Registry;
/// use leasehold_core::{Clock, LeaseKey, ManualClock};
///
/// let clock = ManualClock::starting_now();
/// let registry = Registry::new(Arc::new(clock.clone()));
/// let key = LeaseKey::parse("", "leader")?;
/// registry.set(&key, Some(clock.now() + Duration::from_secs(5)));
/// assert!(registry.has_lease(&key));
/// let default_namespace = registry.namespace(&key.namespace);
/// assert!(default_namespace.has_lease("leader"));
/// clock.advance(Duration::from_secs(5));
/// assert!(!registry.has_lease(&key));
/// assert!(!default_namespace.has_lease("leader"));
/// # Ok::<(), leasehold_core::ValidationError>(())
/// ```
pub struct Registry {
    /// The default (empty) namespace, outside the map: no key of the map is ever compared with an
    /// empty string (`memcmp` of two dangling pointers can cost ten times the rest of a lookup;
    /// the bench's `has_lease` row).
    default_namespace: Arc<NamespaceDeadlines>,
    /// Every other namespace.
    namespaces: RwLock<HashMap<Namespace, Arc<NamespaceDeadlines>, FastHash>>,
    clock: Arc<dyn Clock>,
    /// The instant the registry was made: `confirmed` counts from it.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the last grant or renewal recorded (0: none yet).
    confirmed: AtomicU64,
    /// The service's doorbell, for [`Registry::wakeups`].
    doorbell: RwLock<Option<Arc<dyn leasehold_storage::doorbell::Doorbell>>>,
}

/// The deadlines of one namespace of a [`Registry`], keyed by lease name. Obtained from
/// [`Registry::namespace`]; it stays valid (and shared with the registry) for the registry's
/// lifetime.
pub struct NamespaceDeadlines {
    deadlines: DashMap<LeaseName, Instant, FastHash>,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for NamespaceDeadlines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceDeadlines")
            .field("leases", &self.deadlines.len())
            .finish_non_exhaustive()
    }
}

impl NamespaceDeadlines {
    fn new(clock: &Arc<dyn Clock>) -> Arc<Self> {
        Arc::new(Self {
            deadlines: DashMap::with_hasher(FastHash::default()),
            clock: Arc::clone(clock),
        })
    }

    /// Whether the lease `name` of this namespace is held now: a deadline is recorded and the
    /// clock is before it.
    #[must_use]
    #[inline]
    pub fn has_lease(&self, name: &str) -> bool {
        match self.deadlines.get(name) {
            Some(deadline) => self.clock.now() < *deadline,
            None => false,
        }
    }

    /// The local deadline recorded for `name`, if any (it may have passed).
    #[must_use]
    pub fn deadline(&self, name: &str) -> Option<Instant> {
        self.deadlines.get(name).map(|d| *d)
    }

    /// Records or clears `name`'s deadline; answers whether a deadline was added (`Some(true)`)
    /// or removed (`Some(false)`), `None` when only moved or nothing changed.
    fn set(&self, name: &LeaseName, deadline: Option<Instant>) -> Option<bool> {
        match deadline {
            Some(d) => {
                if let Some(mut slot) = self.deadlines.get_mut(name.as_str()) {
                    *slot = d;
                    None
                } else {
                    self.deadlines.insert(name.clone(), d);
                    Some(true)
                }
            }
            None => self.deadlines.remove(name.as_str()).map(|_| false),
        }
    }

    /// A name held now that starts with `prefix`, if any.
    fn held_with_prefix(&self, prefix: &str) -> Option<LeaseName> {
        let now = self.clock.now();
        self.deadlines
            .iter()
            .find(|e| now < *e.value() && e.key().as_str().starts_with(prefix))
            .map(|e| e.key().clone())
    }

    /// How many leases of this namespace are held now (deadline recorded and in the future).
    fn held_count(&self, now: Instant) -> usize {
        self.deadlines.iter().filter(|e| now < *e.value()).count()
    }

    /// Clears every deadline, telling the gauges.
    fn clear(&self, namespace: &str) {
        self.deadlines.retain(|name, _| {
            crate::metrics::held(namespace, name.as_str(), false);
            false
        });
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let leases: usize = self.default_namespace.deadlines.len()
            + self
                .read()
                .values()
                .map(|ns| ns.deadlines.len())
                .sum::<usize>();
        f.debug_struct("Registry")
            .field("leases", &leases)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry reading time from `clock`.
    #[must_use]
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            default_namespace: NamespaceDeadlines::new(&clock),
            namespaces: RwLock::new(HashMap::default()),
            epoch: clock.now(),
            confirmed: AtomicU64::new(0),
            clock,
            doorbell: RwLock::new(None),
        }
    }

    /// Records the service's doorbell (the engine does, when it makes one).
    pub(crate) fn set_doorbell(
        &self,
        doorbell: Option<Arc<dyn leasehold_storage::doorbell::Doorbell>>,
    ) {
        *self
            .doorbell
            .write()
            .unwrap_or_else(PoisonError::into_inner) = doorbell;
    }

    /// Whether the service's waiters are woken by rings or poll: `None` without a doorbell
    /// (in-memory stores, in-memory SQLite; they poll).
    #[must_use]
    pub fn wakeups(&self) -> Option<leasehold_storage::doorbell::Wakeups> {
        self.doorbell
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(|d| d.wakeups())
    }

    fn read(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, HashMap<Namespace, Arc<NamespaceDeadlines>, FastHash>> {
        self.namespaces
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn find(&self, namespace: &str) -> Option<Arc<NamespaceDeadlines>> {
        if namespace.is_empty() {
            return Some(Arc::clone(&self.default_namespace));
        }
        self.read().get(namespace).cloned()
    }

    /// The deadlines of `namespace`, created empty if no lease of it was recorded yet. Keep it to
    /// ask about that namespace without looking the namespace up each time.
    #[must_use]
    pub fn namespace(&self, namespace: &Namespace) -> Arc<NamespaceDeadlines> {
        if let Some(found) = self.find(namespace.as_str()) {
            return found;
        }
        let mut map = self
            .namespaces
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(
            map.entry(namespace.clone())
                .or_insert_with(|| NamespaceDeadlines::new(&self.clock)),
        )
    }

    /// Whether `key` is held now: a deadline is recorded and the clock is before it.
    #[must_use]
    pub fn has_lease(&self, key: &LeaseKey) -> bool {
        self.has_lease_str(key.namespace.as_str(), key.name.as_str())
    }

    /// Like [`Registry::has_lease`], for a key given as its two parts, without building a
    /// [`LeaseKey`] (no allocation).
    #[must_use]
    pub fn has_lease_str(&self, namespace: &str, name: &str) -> bool {
        if namespace.is_empty() {
            return self.default_namespace.has_lease(name);
        }
        let map = self.read();
        match map.get(namespace) {
            Some(ns) => ns.has_lease(name),
            None => false,
        }
    }

    /// A lease of `namespace` held now whose name starts with `prefix` (the first found), if
    /// any: the permits of one semaphore share a prefix. Walks that namespace's deadlines.
    #[must_use]
    pub fn held_with_prefix(&self, namespace: &str, prefix: &str) -> Option<LeaseName> {
        if namespace.is_empty() {
            return self.default_namespace.held_with_prefix(prefix);
        }
        self.read().get(namespace)?.held_with_prefix(prefix)
    }

    /// The local deadline recorded for `key`, if any (it may have passed).
    #[must_use]
    pub fn deadline(&self, key: &LeaseKey) -> Option<Instant> {
        self.find(key.namespace.as_str())?
            .deadline(key.name.as_str())
    }

    /// Records (`Some`: a grant or a confirmed renewal, which [`Registry::last_confirmed`]
    /// remembers) or clears (`None`) the local deadline of `key`. The gauges of
    /// [`crate::metrics`] follow.
    pub fn set(&self, key: &LeaseKey, deadline: Option<Instant>) {
        if deadline.is_some() {
            let since = self.clock.now().saturating_duration_since(self.epoch);
            let nanos = u64::try_from(since.as_nanos()).unwrap_or(u64::MAX).max(1);
            self.confirmed.fetch_max(nanos, Ordering::Relaxed);
        }
        let changed = match (self.find(key.namespace.as_str()), deadline) {
            (Some(ns), _) => ns.set(&key.name, deadline),
            (None, Some(_)) => self.namespace(&key.namespace).set(&key.name, deadline),
            (None, None) => None,
        };
        if let Some(held) = changed {
            crate::metrics::held(key.namespace.as_str(), key.name.as_str(), held);
        }
    }

    /// Clears every deadline: nothing is held from now on.
    pub fn clear(&self) {
        self.default_namespace.clear("");
        for (namespace, ns) in self.read().iter() {
            ns.clear(namespace.as_str());
        }
    }

    /// How many leases are held now: a deadline is recorded and the clock is before it. Walks
    /// every recorded deadline (no allocation).
    #[must_use]
    pub fn held_count(&self) -> usize {
        let now = self.clock.now();
        self.default_namespace.held_count(now)
            + self
                .read()
                .values()
                .map(|ns| ns.held_count(now))
                .sum::<usize>()
    }

    /// The instant of the last grant or confirmed renewal recorded by any lease, if any.
    #[must_use]
    pub fn last_confirmed(&self) -> Option<Instant> {
        match self.confirmed.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(self.epoch + Duration::from_nanos(nanos)),
        }
    }

    /// The keys with a deadline still in the future.
    #[must_use]
    pub fn held(&self) -> Vec<LeaseKey> {
        let now = self.clock.now();
        let map = self.read();
        let mut held = Vec::new();
        let all = std::iter::once(("", &self.default_namespace))
            .chain(map.iter().map(|(namespace, ns)| (namespace.as_str(), ns)));
        for (namespace, ns) in all {
            for entry in ns.deadlines.iter() {
                if now < *entry.value() {
                    // Both parts were validated when the key was set.
                    if let Ok(namespace) = Namespace::new(namespace) {
                        held.push(LeaseKey::new(namespace, entry.key().clone()));
                    }
                }
            }
        }
        held
    }

    /// The clock deadlines are compared with.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }
}

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

    #[test]
    fn held_with_prefix_finds_only_live_names_of_its_namespace() {
        let clock = ManualClock::starting_now();
        let registry = Registry::new(Arc::new(clock.clone()));
        let soon = clock.now() + Duration::from_secs(1);
        registry.set(
            &LeaseKey::new(
                Namespace::new("ns").expect("valid"),
                LeaseName::new("pool#permit:1/3").expect("valid"),
            ),
            Some(soon),
        );
        registry.set(
            &LeaseKey::new(
                Namespace::default(),
                LeaseName::new("pool#permit:0/3").expect("valid"),
            ),
            Some(soon),
        );
        let found = registry.held_with_prefix("ns", "pool#permit:");
        assert_eq!(
            found.as_ref().map(LeaseName::as_str),
            Some("pool#permit:1/3")
        );
        assert!(registry.held_with_prefix("ns", "pool#permit:0/").is_none());
        assert!(registry.held_with_prefix("", "pool#permit:0/").is_some());
        assert!(registry.held_with_prefix("other", "pool").is_none());
        clock.advance(Duration::from_secs(1));
        assert!(registry.held_with_prefix("ns", "pool").is_none());
        assert!(registry.held_with_prefix("", "pool").is_none());
    }

    #[test]
    fn namespace_handles_see_later_writes_and_clears() {
        let clock = ManualClock::starting_now();
        let registry = Registry::new(Arc::new(clock.clone()));
        let key = LeaseKey::parse("jobs", "a").expect("valid");
        let jobs = registry.namespace(&key.namespace);
        assert!(!jobs.has_lease("a"));
        registry.set(&key, Some(clock.now() + Duration::from_secs(2)));
        assert!(jobs.has_lease("a"));
        assert_eq!(registry.held(), vec![key.clone()]);
        registry.set(&key, None);
        assert!(!jobs.has_lease("a"));
        assert!(registry.deadline(&key).is_none());
        registry.set(&key, Some(clock.now() + Duration::from_secs(2)));
        registry.clear();
        assert!(!jobs.has_lease("a"));
        assert!(registry.held().is_empty());
        // Another namespace with the same lease name is another lease.
        let other = LeaseKey::parse("other", "a").expect("valid");
        registry.set(&other, Some(clock.now() + Duration::from_secs(2)));
        assert!(!jobs.has_lease("a"));
        assert!(registry.has_lease(&other));
    }

    #[test]
    fn held_count_and_last_confirmed_follow_grants_renewals_and_clears() {
        let clock = ManualClock::starting_now();
        let registry = Registry::new(Arc::new(clock.clone()));
        assert_eq!(
            (registry.held_count(), registry.last_confirmed()),
            (0, None)
        );
        let a = LeaseKey::parse("", "a").expect("valid");
        let b = LeaseKey::parse("jobs", "b").expect("valid");
        registry.set(&a, Some(clock.now() + Duration::from_secs(1)));
        clock.advance(Duration::from_millis(300));
        registry.set(&b, Some(clock.now() + Duration::from_secs(5)));
        assert_eq!(registry.held_count(), 2);
        assert_eq!(registry.last_confirmed(), Some(clock.now()));
        clock.advance(Duration::from_secs(1));
        assert_eq!(registry.held_count(), 1, "a's deadline passed");
        registry.set(&b, None);
        assert_eq!(registry.held_count(), 0);
        assert_eq!(
            registry.last_confirmed(),
            Some(clock.now() - Duration::from_secs(1)),
            "a clear is no confirmation"
        );
        registry.set(&a, Some(clock.now() + Duration::from_secs(1)));
        registry.clear();
        assert_eq!(registry.held_count(), 0);
    }
}
