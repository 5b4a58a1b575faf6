//! Lease events, for those who prefer a stream to callbacks.

use leasehold_core::{FencingToken, HolderId, LeaseKey, LossReason};

/// Something that happened to a lease of a [`LeaseService`](crate::LeaseService), as
/// broadcast to [`LeaseService::subscribe`](crate::LeaseService::subscribe)rs: which lease,
/// whose tenure, and what happened to it.
///
/// # Examples
/// ```
/// use leasehold::{EventKind, LeaseEvent};
/// fn describe(event: &LeaseEvent) -> String {
///     match event.what {
///         EventKind::Acquired => format!("{} won {} ({})", event.holder, event.key, event.token),
///         EventKind::Lost(reason) => format!("{} lost {}: {reason:?}", event.holder, event.key),
///         _ => format!("{event:?}"),
///     }
/// }
/// # let _ = describe;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseEvent {
    /// The lease.
    pub key: LeaseKey,
    /// The holder of the tenure the event is about: this service's holder, except for
    /// [`EventKind::HolderChanged`], where it is the holder seen.
    pub holder: HolderId,
    /// The fencing token of that tenure.
    pub token: FencingToken,
    /// What happened.
    pub what: EventKind,
}

/// What happened to a tenure (see [`LeaseEvent`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EventKind {
    /// This holder began the tenure.
    Acquired,
    /// A renewal of the tenure succeeded.
    Renewed,
    /// The tenure ended without being released: treat the lease as not held.
    Lost(LossReason),
    /// The tenure was given up on request (stop, standby, shutdown, hand-over): treat the lease
    /// as not held from now on. Sent before the release; [`EventKind::Released`] follows once the
    /// release has settled.
    Ended,
    /// A tenure given up on request has been settled with the store.
    Released,
    /// Another holder (or, after others, this one) now holds the lease.
    HolderChanged,
}

impl LeaseEvent {
    pub(crate) fn new(
        key: LeaseKey,
        holder: HolderId,
        token: FencingToken,
        what: EventKind,
    ) -> Self {
        Self {
            key,
            holder,
            token,
            what,
        }
    }

    /// The lease the event is about.
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }
}
