//! Lease events, for those who prefer a stream to callbacks.

use leasehold_core::{FencingToken, HolderId, LeaseKey, LossReason};

/// Something that happened to a lease of a [`LeaseService`](crate::LeaseService), as
/// broadcast to [`LeaseService::subscribe`](crate::LeaseService::subscribe)rs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// This holder began a tenure.
    Acquired {
        /// The lease.
        key: LeaseKey,
        /// The tenure's fencing token.
        token: FencingToken,
        /// This holder.
        holder: HolderId,
    },
    /// A renewal succeeded.
    Renewed {
        /// The lease.
        key: LeaseKey,
        /// The tenure's fencing token.
        token: FencingToken,
        /// This holder.
        holder: HolderId,
    },
    /// The tenure ended without being released: treat the lease as not held.
    Lost {
        /// The lease.
        key: LeaseKey,
        /// The tenure that ended.
        token: FencingToken,
        /// This holder.
        holder: HolderId,
        /// Why.
        reason: LossReason,
    },
    /// A tenure given up on request (stop, standby, shutdown) ended here: treat the lease as
    /// not held from now on. Sent before the release; [`LeaseEvent::Released`] follows once
    /// the release has settled.
    Ended {
        /// The lease.
        key: LeaseKey,
        /// The tenure given up.
        token: FencingToken,
        /// This holder.
        holder: HolderId,
    },
    /// A tenure given up on request has been settled with the store.
    Released {
        /// The lease.
        key: LeaseKey,
        /// The tenure given up.
        token: FencingToken,
        /// This holder.
        holder: HolderId,
    },
    /// Another holder (or, after others, this one) now holds the lease.
    HolderChanged {
        /// The lease.
        key: LeaseKey,
        /// The fencing token of the tenure seen.
        token: FencingToken,
        /// The holder seen.
        holder: HolderId,
    },
}

impl LeaseEvent {
    /// The lease the event is about.
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        match self {
            LeaseEvent::Acquired { key, .. }
            | LeaseEvent::Renewed { key, .. }
            | LeaseEvent::Lost { key, .. }
            | LeaseEvent::Ended { key, .. }
            | LeaseEvent::Released { key, .. }
            | LeaseEvent::HolderChanged { key, .. } => key,
        }
    }
}
