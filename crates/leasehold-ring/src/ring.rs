//! The ring itself: live hosts, their virtual nodes, and which host owns which name.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use hashring::HashRing;

use crate::point::{NameKey, Point};
use crate::{Result, RingConfig, RingError};

/// Largest host weight accepted by [`HostRing::add_weighted`].
pub const MAX_WEIGHT: u32 = 100;

/// A consistent-hash ring over the live hosts, deciding which host competes for which name.
///
/// Each host of weight `w` puts `w * virtual_nodes` points on the ring; a name belongs to the
/// first point at or after its hash, wrapping around. The ring is pure and deterministic: it
/// depends only on the configuration and the set of hosts with their weights, never on the order
/// they were added in, the process, or the platform, so every host computes the same owner for
/// every name (see the crate docs for the hashing). When a host joins, only names moving to it
/// change owner, about `1/n` of them; when a host leaves, only its own names move.
///
/// # Examples
/// ```
/// use leasehold_ring::HostRing;
///
/// let ring = HostRing::from_hosts(["host-a", "host-b", "host-c"]);
/// let owner = ring.owner("reports/daily").expect("the ring has hosts");
/// assert!(ring.is_owner(owner, "reports/daily"));
///
/// // The same live set, listed in another order, gives the same owner.
/// let again = HostRing::from_hosts(["host-c", "host-a", "host-b"]);
/// assert_eq!(again.owner("reports/daily"), Some(owner));
/// assert_eq!(ring, again);
/// ```
#[derive(Clone)]
pub struct HostRing {
    config: RingConfig,
    /// Live hosts and their weights. The ring's points are a function of this map and `config`.
    hosts: BTreeMap<Arc<str>, u32>,
    ring: HashRing<Point>,
}

impl HostRing {
    /// Creates an empty ring with the given configuration.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{HostRing, RingConfig};
    ///
    /// let ring = HostRing::new(RingConfig::default().with_virtual_nodes(64))?;
    /// assert!(ring.is_empty());
    /// assert_eq!(ring.owner("any"), None);
    /// # Ok::<(), leasehold_ring::RingError>(())
    /// ```
    ///
    /// # Errors
    /// [`RingError::VirtualNodes`] when the configuration does not [validate](RingConfig::validate).
    pub fn new(config: RingConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            config,
            hosts: BTreeMap::new(),
            ring: HashRing::new(),
        })
    }

    /// Builds a ring of the given hosts, each of weight 1, with the default configuration.
    ///
    /// Duplicate hosts count once. Accepts anything that is a string: `&str`, `String`,
    /// [`HolderId`](leasehold_core::HolderId).
    ///
    /// # Examples
    /// ```
    /// use leasehold_core::HolderId;
    /// use leasehold_ring::HostRing;
    ///
    /// let live = vec![HolderId::new("host-a:1234:abcd")?, HolderId::new("host-b:99:ef01")?];
    /// let ring = HostRing::from_hosts(&live);
    /// assert_eq!(ring.len(), 2);
    /// assert_eq!(ring.point_count(), 2 * 160);
    /// # Ok::<(), leasehold_core::ValidationError>(())
    /// ```
    #[must_use]
    pub fn from_hosts<I>(hosts: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        Self::build(RingConfig::default(), hosts)
    }

    /// Builds a ring of the given hosts, each of weight 1, with the given configuration.
    ///
    /// This is the cheapest way to rebuild the ring from a new live set: all points are hashed
    /// and sorted once.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{HostRing, RingConfig};
    ///
    /// let config = RingConfig::default().with_virtual_nodes(10);
    /// let ring = HostRing::with_hosts(config, ["host-a", "host-b", "host-a"])?;
    /// assert_eq!(ring.hosts().collect::<Vec<_>>(), ["host-a", "host-b"]);
    /// assert_eq!(ring.point_count(), 20);
    /// # Ok::<(), leasehold_ring::RingError>(())
    /// ```
    ///
    /// # Errors
    /// [`RingError::VirtualNodes`] when the configuration does not [validate](RingConfig::validate).
    pub fn with_hosts<I>(config: RingConfig, hosts: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        config.validate()?;
        Ok(Self::build(config, hosts))
    }

    /// Builds the ring from an already validated configuration.
    fn build<I>(config: RingConfig, hosts: I) -> Self
    where
        I: IntoIterator,
        I::Item: AsRef<str>,
    {
        let hosts: BTreeMap<Arc<str>, u32> = hosts
            .into_iter()
            .map(|host| (Arc::from(host.as_ref()), 1))
            .collect();
        let mut points = Vec::new();
        for (host, &weight) in &hosts {
            points.extend(Self::points(config, host, 0..weight));
        }
        let mut ring = HashRing::new();
        ring.batch_add(points);
        Self {
            config,
            hosts,
            ring,
        }
    }

    /// The points a host contributes for the weight units in `units`.
    fn points(
        config: RingConfig,
        host: &Arc<str>,
        units: std::ops::Range<u32>,
    ) -> impl Iterator<Item = Point> + '_ {
        // Weights are at most MAX_WEIGHT and virtual nodes at most MAX_VIRTUAL_NODES, so the
        // products stay far below u32::MAX; saturating keeps the arithmetic panic-free anyway.
        let start = units.start.saturating_mul(config.virtual_nodes());
        let end = units.end.saturating_mul(config.virtual_nodes());
        (start..end).map(move |replica| Point {
            host: Arc::clone(host),
            replica,
        })
    }

    /// Adds a host of weight 1. Returns whether the ring changed.
    ///
    /// Adding a host that is already on the ring with weight 1 changes nothing; adding one with
    /// another weight sets its weight back to 1.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let mut ring = HostRing::from_hosts(["host-a"]);
    /// assert!(ring.add("host-b"));
    /// assert!(!ring.add("host-b"));
    /// assert_eq!(ring, HostRing::from_hosts(["host-b", "host-a"]));
    /// ```
    pub fn add(&mut self, host: impl AsRef<str>) -> bool {
        self.set_weight(host.as_ref(), 1)
    }

    /// Adds a host, or changes its weight. Returns whether the ring changed.
    ///
    /// A host of weight `w` puts `w * virtual_nodes` points on the ring and so owns about `w`
    /// times the share of a host of weight 1. A host's points for weight `w` are a subset of its
    /// points for any larger weight, so raising a weight only moves names to that host, and
    /// lowering it only moves names away from it.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let mut ring = HostRing::from_hosts(["host-a"]);
    /// assert!(ring.add_weighted("host-big", 2)?);
    /// assert_eq!(ring.weight("host-big"), Some(2));
    /// assert_eq!(ring.point_count(), 3 * 160);
    /// assert!(ring.add_weighted("host-big", 0).is_err());
    /// # Ok::<(), leasehold_ring::RingError>(())
    /// ```
    ///
    /// # Errors
    /// [`RingError::Weight`] when `weight` is 0 or above [`MAX_WEIGHT`]; the ring is unchanged.
    pub fn add_weighted(&mut self, host: impl AsRef<str>, weight: u32) -> Result<bool> {
        let host = host.as_ref();
        if weight == 0 || weight > MAX_WEIGHT {
            return Err(RingError::Weight {
                host: host.to_owned(),
                weight,
                max: MAX_WEIGHT,
            });
        }
        Ok(self.set_weight(host, weight))
    }

    /// Sets a host's weight (1..=MAX_WEIGHT), adding or removing only the points that differ.
    fn set_weight(&mut self, host: &str, weight: u32) -> bool {
        let old = self.hosts.get(host).copied().unwrap_or(0);
        if old == weight {
            return false;
        }
        // Reuse the map's allocation for the host id when it is already present.
        let host: Arc<str> = self
            .hosts
            .get_key_value(host)
            .map_or_else(|| Arc::from(host), |(h, _)| Arc::clone(h));
        if weight > old {
            self.ring
                .batch_add(Self::points(self.config, &host, old..weight).collect());
        } else {
            let keep_below = weight.saturating_mul(self.config.virtual_nodes());
            self.retain(|point| point.host != host || point.replica < keep_below);
        }
        self.hosts.insert(host, weight);
        true
    }

    /// Removes a host and all its points. Returns whether it was on the ring.
    ///
    /// Only the names the host owned move, each to the host after it on the ring.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let mut ring = HostRing::from_hosts(["host-a", "host-b"]);
    /// assert!(ring.remove("host-a"));
    /// assert!(!ring.remove("host-a"));
    /// assert_eq!(ring.owner("anything"), Some("host-b"));
    /// ```
    pub fn remove(&mut self, host: impl AsRef<str>) -> bool {
        let host = host.as_ref();
        if self.hosts.remove(host).is_none() {
            return false;
        }
        self.retain(|point| &*point.host != host);
        true
    }

    /// Keeps only the points for which `keep` holds.
    ///
    /// hashring removes one point per call with a binary search and a `Vec::remove`: quadratic
    /// for a host's hundreds of points, and unsure which point it takes if two hashes collide.
    /// Filtering and re-adding is linear plus one sort of an already sorted list.
    fn retain(&mut self, keep: impl Fn(&Point) -> bool) {
        let points: Vec<Point> = std::mem::take(&mut self.ring)
            .into_iter()
            .filter(keep)
            .collect();
        self.ring.batch_add(points);
    }

    /// The host that owns `name`, or `None` when the ring is empty.
    ///
    /// Names are hashed by their bytes, never by their position in any list.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let ring = HostRing::from_hosts(["host-a", "host-b", "host-c"]);
    /// let owner = ring.owner("task-42");
    /// assert!(owner.is_some());
    /// assert_eq!(HostRing::from_hosts(["host-c", "host-b", "host-a"]).owner("task-42"), owner);
    /// assert_eq!(HostRing::from_hosts(Vec::<String>::new()).owner("task-42"), None);
    /// ```
    #[must_use]
    pub fn owner(&self, name: &str) -> Option<&str> {
        self.ring.get(&NameKey(name)).map(|point| &*point.host)
    }

    /// Whether `host` owns `name`: the test a sharded task makes before competing for it.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let ring = HostRing::from_hosts(["host-a", "host-b"]);
    /// let owners = ["host-a", "host-b"].iter().filter(|h| ring.is_owner(h, "task-7")).count();
    /// assert_eq!(owners, 1);
    /// assert!(!ring.is_owner("host-z", "task-7"));
    /// ```
    #[must_use]
    pub fn is_owner(&self, host: impl AsRef<str>, name: &str) -> bool {
        self.owner(name) == Some(host.as_ref())
    }

    /// The hosts on the ring, in ascending order.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let ring = HostRing::from_hosts(["host-b", "host-a"]);
    /// assert_eq!(ring.hosts().collect::<Vec<_>>(), ["host-a", "host-b"]);
    /// ```
    pub fn hosts(&self) -> impl ExactSizeIterator<Item = &str> + DoubleEndedIterator + '_ {
        self.hosts.keys().map(|host| &**host)
    }

    /// Whether `host` is on the ring.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let ring = HostRing::from_hosts(["host-a"]);
    /// assert!(ring.contains("host-a"));
    /// assert!(!ring.contains("host-b"));
    /// ```
    #[must_use]
    pub fn contains(&self, host: impl AsRef<str>) -> bool {
        self.hosts.contains_key(host.as_ref())
    }

    /// The weight of `host`, or `None` when it is not on the ring.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let mut ring = HostRing::from_hosts(["host-a"]);
    /// ring.add_weighted("host-b", 3)?;
    /// assert_eq!(ring.weight("host-a"), Some(1));
    /// assert_eq!(ring.weight("host-b"), Some(3));
    /// assert_eq!(ring.weight("host-c"), None);
    /// # Ok::<(), leasehold_ring::RingError>(())
    /// ```
    #[must_use]
    pub fn weight(&self, host: impl AsRef<str>) -> Option<u32> {
        self.hosts.get(host.as_ref()).copied()
    }

    /// The number of hosts on the ring.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// assert_eq!(HostRing::from_hosts(["host-a", "host-b", "host-a"]).len(), 2);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Whether the ring has no hosts (every [`owner`](Self::owner) is then `None`).
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{HostRing, RingConfig};
    ///
    /// assert!(HostRing::new(RingConfig::default())?.is_empty());
    /// # Ok::<(), leasehold_ring::RingError>(())
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// The number of points (virtual nodes) on the ring: the sum of weights times
    /// `virtual_nodes`.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// assert_eq!(HostRing::from_hosts(["host-a", "host-b"]).point_count(), 320);
    /// ```
    #[must_use]
    pub fn point_count(&self) -> usize {
        self.ring.len()
    }

    /// The configuration the ring was built with.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{HostRing, RingConfig};
    ///
    /// assert_eq!(HostRing::from_hosts(["host-a"]).config(), RingConfig::default());
    /// ```
    #[must_use]
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// Groups `names` by owning host. Every host on the ring is a key, with an empty list when it
    /// owns none of the names; each list keeps the order of `names`.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::HostRing;
    ///
    /// let ring = HostRing::from_hosts(["host-a", "host-b"]);
    /// let names = ["task-1", "task-2", "task-3"];
    /// let by_host = ring.assignments(names);
    /// assert_eq!(by_host.len(), 2);
    /// assert_eq!(by_host.values().map(Vec::len).sum::<usize>(), names.len());
    /// for (host, owned) in &by_host {
    ///     assert!(owned.iter().all(|name| ring.is_owner(host, name)));
    /// }
    /// ```
    #[must_use]
    pub fn assignments<'a, I>(&self, names: I) -> BTreeMap<&str, Vec<&'a str>>
    where
        I: IntoIterator<Item = &'a str>,
    {
        let mut by_host: BTreeMap<&str, Vec<&'a str>> =
            self.hosts().map(|host| (host, Vec::new())).collect();
        for name in names {
            if let Some(owner) = self.owner(name) {
                by_host.entry(owner).or_default().push(name);
            }
        }
        by_host
    }
}

/// Two rings are equal when they have the same configuration and the same hosts with the same
/// weights, and so the same points and the same owner for every name.
impl PartialEq for HostRing {
    fn eq(&self, other: &Self) -> bool {
        self.config == other.config && self.hosts == other.hosts
    }
}

impl Eq for HostRing {}

/// Shows the configuration and hosts with their weights, not the points.
impl fmt::Debug for HostRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostRing")
            .field("config", &self.config)
            .field("hosts", &self.hosts)
            .field("points", &self.ring.len())
            .finish()
    }
}

#[cfg(test)]
mod tests;
