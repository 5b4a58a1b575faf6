//! Ring configuration: how many points each host puts on the ring.

use crate::{Result, RingError};

/// Default number of virtual nodes per unit of host weight.
///
/// A host's share sums 160 arcs, so it spreads by about 1/sqrt(160) = 8 % around the mean;
/// four times the points narrow that by half at four times the memory and lookup table size.
/// `cargo bench -p leasehold-ring` prints the spread of load and the names moved per join
/// (figures in docs/benchmarks.md).
pub const DEFAULT_VIRTUAL_NODES: u32 = 160;

/// Largest number of virtual nodes per unit of host weight accepted by [`RingConfig::validate`].
pub const MAX_VIRTUAL_NODES: u32 = 10_000;

/// How a [`HostRing`](crate::HostRing) places hosts on the ring.
///
/// Every process that shards the same names must use the same configuration: a different number
/// of virtual nodes gives a different assignment.
///
/// # Examples
/// ```
/// use leasehold_ring::RingConfig;
///
/// let config = RingConfig::default().with_virtual_nodes(200);
/// assert_eq!(config.virtual_nodes(), 200);
/// assert!(config.validate().is_ok());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RingConfig {
    virtual_nodes: u32,
}

impl Default for RingConfig {
    fn default() -> Self {
        Self {
            virtual_nodes: DEFAULT_VIRTUAL_NODES,
        }
    }
}

impl RingConfig {
    /// Sets the number of points a host of weight 1 puts on the ring (its virtual nodes).
    ///
    /// Default: [`DEFAULT_VIRTUAL_NODES`] (160). More points even out the load at the cost of a
    /// larger ring (16 bytes and one hash per point) and slower rebuilds.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::RingConfig;
    ///
    /// assert_eq!(RingConfig::default().virtual_nodes(), 160);
    /// assert_eq!(RingConfig::default().with_virtual_nodes(64).virtual_nodes(), 64);
    /// ```
    #[must_use]
    pub fn with_virtual_nodes(mut self, virtual_nodes: u32) -> Self {
        self.virtual_nodes = virtual_nodes;
        self
    }

    /// The number of points a host of weight 1 puts on the ring.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{DEFAULT_VIRTUAL_NODES, RingConfig};
    ///
    /// assert_eq!(RingConfig::default().virtual_nodes(), DEFAULT_VIRTUAL_NODES);
    /// ```
    #[must_use]
    pub fn virtual_nodes(&self) -> u32 {
        self.virtual_nodes
    }

    /// Checks the configuration.
    ///
    /// # Examples
    /// ```
    /// use leasehold_ring::{RingConfig, RingError};
    ///
    /// assert!(RingConfig::default().validate().is_ok());
    /// assert!(matches!(
    ///     RingConfig::default().with_virtual_nodes(0).validate(),
    ///     Err(RingError::VirtualNodes { value: 0, .. })
    /// ));
    /// ```
    ///
    /// # Errors
    /// [`RingError::VirtualNodes`] when the number of virtual nodes is 0 or above
    /// [`MAX_VIRTUAL_NODES`].
    pub fn validate(&self) -> Result<()> {
        if self.virtual_nodes == 0 || self.virtual_nodes > MAX_VIRTUAL_NODES {
            return Err(RingError::VirtualNodes {
                value: self.virtual_nodes,
                max: MAX_VIRTUAL_NODES,
            });
        }
        Ok(())
    }
}
