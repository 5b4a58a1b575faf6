//! Errors: a ring configuration or a host weight that was refused.

/// A ring configuration or host weight was refused; the ring is left unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RingError {
    /// The number of virtual nodes per host is outside `1..=MAX_VIRTUAL_NODES`.
    #[error("virtual_nodes is {value}; it must be between 1 and {max}")]
    VirtualNodes {
        /// The value given.
        value: u32,
        /// The largest value allowed.
        max: u32,
    },
    /// A host weight is outside `1..=MAX_WEIGHT`.
    #[error("weight of host {host:?} is {weight}; it must be between 1 and {max}")]
    Weight {
        /// The host the weight was given for.
        host: String,
        /// The weight given.
        weight: u32,
        /// The largest weight allowed.
        max: u32,
    },
}

/// The result type of this crate.
pub type Result<T, E = RingError> = std::result::Result<T, E>;
