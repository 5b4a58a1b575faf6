//! The one error type of this crate.

use std::time::Duration;

/// Why a [`LocalLeases`](crate::LocalLeases) operation was refused.
///
/// Every variant names the lease it is about (where there is one), so the message can be logged
/// as it is.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leasehold_local::{LocalLeaseError, LocalLeases};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let leases = LocalLeases::new();
/// leases.create("cursor-1", Duration::from_secs(30), |_| {}).unwrap();
/// let err = leases.create("cursor-1", Duration::from_secs(30), |_| {}).unwrap_err();
/// assert!(matches!(err, LocalLeaseError::AlreadyExists { ref name } if name == "cursor-1"));
/// assert_eq!(err.to_string(), "a local lease named \"cursor-1\" already exists");
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocalLeaseError {
    /// `create` was given a name that is held by a live (or expired, not yet dispatched) lease.
    #[error("a local lease named {name:?} already exists")]
    AlreadyExists {
        /// The name asked for.
        name: String,
    },
    /// No lease of that name exists: it never did, was cancelled, or has expired and its
    /// listener has been dispatched.
    #[error("no local lease named {name:?}")]
    Unknown {
        /// The name asked for.
        name: String,
    },
    /// The lease's deadline has passed. Its listener has been or will be called; the lease can no
    /// longer be renewed or cancelled.
    #[error("the local lease {name:?} has expired")]
    Expired {
        /// The name asked for.
        name: String,
    },
    /// The service was closed (explicitly, by dropping its last handle, or because its runtime
    /// shut down).
    #[error("the local lease service is closed")]
    Closed,
    /// The period is zero or longer than [`MAX_PERIOD`](crate::MAX_PERIOD).
    #[error("lease period {period:?} is out of range (must be above zero and at most {max:?})")]
    InvalidPeriod {
        /// The period asked for.
        period: Duration,
        /// The largest period accepted, [`MAX_PERIOD`](crate::MAX_PERIOD).
        max: Duration,
    },
    /// The lease name is not acceptable.
    #[error("invalid local lease name {name:?}: {reason}")]
    InvalidName {
        /// The name given.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The service already holds as many leases as its timer can track.
    #[error("too many local leases (the limit is {limit})")]
    CapacityExceeded {
        /// The largest number of leases one service can hold.
        limit: usize,
    },
}

/// The result of a [`LocalLeases`](crate::LocalLeases) operation.
pub type Result<T, E = LocalLeaseError> = std::result::Result<T, E>;
