//! The guards of a read-write lock: [`SharedLockGuard`] (a reader, on one read slot's permit)
//! and [`ExclusiveLockGuard`] (the writer, on the lock's gate).

use std::time::Duration;

use leasehold_core::{FencingToken, LeaseKey};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{LockError, LockGuard, PermitGuard};

/// A reader of a read-write lock, from [`ReadWriteLocks::acquire_shared`](super::ReadWriteLocks::acquire_shared): one read slot of the
/// lock (a permit of the semaphore `{name}#read`), with that permit's tenure, fencing token and
/// belief. Other readers may hold the lock beside it; no writer does while it is held.
///
/// Released by [`SharedLockGuard::unlock`]`.await`, or in the background on drop, as a
/// [`LockGuard`].
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let locks = service.locks();
/// let ttl = Duration::from_secs(30);
/// let one = locks.read_write().acquire_shared("docs", "catalog", ttl).await?.expect("no writer");
/// let two = locks.read_write().acquire_shared("docs", "catalog", ttl).await?.expect("readers share");
/// assert!(one.is_held() && two.is_held());
/// assert!(locks.read_write().acquire_exclusive("docs", "catalog", ttl).await?.is_none()); // readers in
/// one.unlock().await?;
/// two.unlock().await?;
/// assert!(locks.read_write().acquire_exclusive("docs", "catalog", ttl).await?.is_some());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct SharedLockGuard {
    pub(super) key: LeaseKey,
    pub(super) permit: PermitGuard,
}

impl SharedLockGuard {
    /// The read-write lock's namespace and name (as asked for; the tenure is the read slot's,
    /// [`SharedLockGuard::guard`]`.key()`).
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The fencing token of this reader's tenure (its read slot's: each slot's grows on its
    /// own, so readers' tokens are not ordered against writers').
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.permit.token()
    }

    /// Whether this reader holds the lock now: see [`LockGuard::is_held`]. It agrees with
    /// [`SharedLockGuard::cancellation_token`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.permit.is_held()
    }

    /// Cancelled the instant this reader's tenure ends here (its local deadline, unlock,
    /// shutdown): see [`LockGuard::cancellation_token`].
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.permit.cancellation_token()
    }

    /// The local deadline of this reader's tenure: see [`LockGuard::deadline`].
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.permit.guard().deadline()
    }

    /// The ttl the lock was taken with.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.permit.guard().ttl()
    }

    /// The read slot's lock guard (`{name}#read#permit:{i}/{n}`), to fence with it.
    #[must_use]
    pub fn guard(&self) -> &LockGuard {
        self.permit.guard()
    }

    /// Extends this reader's tenure to its ttl from now: see [`LockGuard::renew`].
    ///
    /// # Errors
    /// As [`LockGuard::renew`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::renew`].
    pub async fn renew(&self) -> Result<(), LockError> {
        self.permit.guard().renew().await
    }

    /// Releases this reader's slot and waits for the answer: see [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::unlock`].
    pub async fn unlock(self) -> Result<(), LockError> {
        self.permit.unlock().await
    }
}

/// The writer of a read-write lock, from [`ReadWriteLocks::acquire_exclusive`](super::ReadWriteLocks::acquire_exclusive): the lock's gate
/// (the plain lock `{name}#rw`), held once no reader was left. Its token, belief, renewal and
/// release are the gate's, so writers' tokens grow from one writer to the next. Neither a
/// reader nor another writer holds the lock while it is held.
///
/// Released by [`ExclusiveLockGuard::unlock`]`.await`, or in the background on drop, as a
/// [`LockGuard`].
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let locks = service.locks();
/// let ttl = Duration::from_secs(30);
/// let writer = locks.read_write().acquire_exclusive("docs", "catalog", ttl).await?.expect("free");
/// assert!(locks.read_write().acquire_shared("docs", "catalog", ttl).await?.is_none());
/// let token = writer.token();
/// writer.unlock().await?;
/// let next = locks.read_write().acquire_exclusive("docs", "catalog", ttl).await?.expect("free");
/// assert!(next.token() > token);
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct ExclusiveLockGuard {
    pub(super) key: LeaseKey,
    pub(super) gate: LockGuard,
}

impl ExclusiveLockGuard {
    /// The read-write lock's namespace and name (as asked for; the tenure is the gate's,
    /// [`ExclusiveLockGuard::guard`]`.key()`).
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The fencing token of this writer's tenure: larger than every earlier writer's of this
    /// lock.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.gate.token()
    }

    /// Whether this writer holds the lock now: see [`LockGuard::is_held`]. It agrees with
    /// [`ExclusiveLockGuard::cancellation_token`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.gate.is_held()
    }

    /// Cancelled the instant this writer's tenure ends here (its local deadline, unlock,
    /// shutdown): see [`LockGuard::cancellation_token`].
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.gate.cancellation_token()
    }

    /// The local deadline of this writer's tenure: see [`LockGuard::deadline`].
    #[must_use]
    pub fn deadline(&self) -> Option<Instant> {
        self.gate.deadline()
    }

    /// The ttl the lock was taken with.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.gate.ttl()
    }

    /// The gate's lock guard (`{name}#rw`), to fence with it ([`LockGuard::begin_fenced`]).
    #[must_use]
    pub fn guard(&self) -> &LockGuard {
        &self.gate
    }

    /// Extends this writer's tenure to its ttl from now: see [`LockGuard::renew`].
    ///
    /// # Errors
    /// As [`LockGuard::renew`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::renew`].
    pub async fn renew(&self) -> Result<(), LockError> {
        self.gate.renew().await
    }

    /// Releases the lock and waits for the answer: see [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::unlock`].
    pub async fn unlock(self) -> Result<(), LockError> {
        self.gate.unlock().await
    }
}
