//! Named locks with a ttl on the lease engine, reached through one handle,
//! [`LeaseService::locks`] → [`Locks`]: the seeds' `lock`, `tryLocker`, `unlock`, `holdLock`,
//! `hasHoldLock`, `queryLockedInstanceByNamePrefix`, PowerJob's `tryLock`/`unlock`, ShedLock's
//! `lockAtLeastFor` and Spring's `JdbcLockRegistry`.
//!
//! # Where things are
//! | file | holds |
//! |---|---|
//! | `locks.rs` | this page, [`Locks`], [`LockError`], [`LockOutcome`], a lock's configuration, the kinds' handles' entry points |
//! | `locks/acquire.rs` | one attempt ([`Locks::attempt`], [`Locks::acquire`]) and waiting ([`Locks::acquire_within`]) |
//! | `locks/release.rs` | release by name ([`Locks::release`]) and the release of one tenure |
//! | `locks/hold.rs` | locks renewed in the background ([`Locks::hold`], [`Locks::is_holding`]) |
//! | `locks/query.rs` | prefix listings ([`Locks::held_with_prefix`]) and fencing by name ([`Locks::begin_fenced`]) |
//! | `locks/queue.rs` | this process's fair queue per lock (`LockQueues`, the family's own state in the service) |
//! | `locks/fair.rs` | fair waiting across processes, a ticket per waiter ([`Locks::fair`] → [`FairLocks`]) |
//! | `locks/all.rs` | several locks all or nothing ([`Locks::all`] → [`AllLocks`], [`MultiLockGuard`]) |
//! | `locks/reentrant.rs` | re-entry by an explicit owner ([`Locks::owned_by`] → [`OwnedLocks`], [`ReentrantGuard`]) |
//! | `locks/permits.rs` | semaphores: `N` permits on `N` plain locks ([`Locks::permits`] → [`Semaphores`], [`PermitGuard`]) |
//! | `locks/held_permits.rs` | permits renewed in the background ([`Semaphores::hold`], [`HeldPermit`], [`Semaphores::is_holding`], [`Semaphores::release`]) |
//! | `locks/read_write.rs` | read-write locks on a gate and read slots ([`Locks::read_write`] → [`ReadWriteLocks`]) |
//! | `locks/rw_guards.rs` | [`SharedLockGuard`], [`ExclusiveLockGuard`] |
//! | `locks/guard.rs` | [`LockGuard`] |
//!
//! The seeds' lock names on [`LeaseService`] (`lock`, `try_locker`, `unlock`, …) are one-line
//! delegations to [`Locks`], kept in the service's `seed_names.rs`. Every guard is a
//! [`Tenure`](crate::Tenure).
//!
//! # A lock is a lease
//! Every lock is a lease actor of the engine, driven by the same [`LeaseMachine`] as a lease
//! task, in its lock mode: one attempt (a refusal says who holds it), renewal only on request
//! ([`LockGuard::renew`]), released on unlock (keeping a minimum hold with
//! [`LockGuard::lock_at_least_for`]). Its local deadline is `send time + ttl − margin`
//! (margin ttl/10, at most 2 s), as for any lease; at that instant [`LockGuard::is_held`] turns
//! false and the guard's cancellation token is cancelled. [`Locks::hold`] switches
//! the same actor to automatic renewal, and so does [`Semaphores::hold`] for a permit's lock
//! (which, unlike a held lock, does not compete again after a loss). Nothing else keeps a
//! deadline.
//!
//! # How a lock is taken
//! 1. Tasks of one service waiting for one lock queue on a local fair mutex, so only one of them
//!    talks to the database at a time; the permit stays with the lock's actor until its tenure
//!    has ended and settled, so the next local waiter starts right after a release (or at the
//!    local deadline of a lock that lapsed), never while a live guard holds it.
//! 2. The task at the head asks the engine for a grant (a new tenure: a new fencing token). The
//!    request runs on the engine thread; if the caller's future is dropped, a grant that arrives
//!    anyway is released at once.
//! 3. While the lock is held by another holder, the task waits the retry interval (default
//!    100 ms, Spring's `idleBetweenTries`), doubling up to 8× with ±25 % jitter, or less when a
//!    PostgreSQL `NOTIFY` announces a release first (one `LISTEN` per service, on a connection
//!    of its own).
//!
//! # Limits
//! - One key carries one tenure per service: a lock on a key that a lease task, a hold or
//!   sharded names of the same service use is refused with [`Error::KeyInUse`]; a lock held by
//!   another task of the same service is [`LockOutcome::HeldLocally`].
//! - Releases of tenures that merely lapse are not announced: waiters find them by polling.
//!
//! [`LeaseMachine`]: leasehold_core::LeaseMachine

mod acquire;
mod all;
mod fair;
mod guard;
mod held_permits;
mod hold;
mod permits;
mod query;
mod queue;
mod read_write;
mod reentrant;
mod release;
mod rw_guards;

use std::time::Duration;

use leasehold_core::{
    DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, Term, ValidationError,
};

pub(crate) use acquire::LockContext;
pub use all::{AllLocks, MultiLockGuard, MultiLockOutcome};
pub use fair::{FairLocks, MAX_FAIR_TICKET_TERM};
pub use guard::LockGuard;
pub use held_permits::HeldPermit;
pub use permits::{PermitGuard, Semaphores};
pub(crate) use queue::LockQueues;
pub use read_write::{MAX_READERS, ReadWriteLocks};
pub use reentrant::{OwnedLocks, ReentrantGuard};
pub(crate) use release::release as release_tenure;
pub use rw_guards::{ExclusiveLockGuard, SharedLockGuard};

use crate::{Error, LeaseService, Result};

/// The ttl of a lock when none is given: 5 minutes, the seeds' default.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(300);
/// The namespace of [`LeaseService::try_lock`] and [`LeaseService::unlock_default`].
pub const DEFAULT_LOCK_NAMESPACE: &str = "lock";
/// The first wait between attempts of [`Locks::acquire_within`] (Spring's `idleBetweenTries`).
pub const DEFAULT_LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// The named locks of one [`LeaseService`]: take, wait for, hold, release, list and fence
/// them. Borrowed from the service by [`LeaseService::locks`]; cheap to make, so make one
/// where you need it. The seeds' method names stay on [`LeaseService`] itself
/// (`lock`, `try_locker`, `unlock`, `hold_lock`, …), each a delegation to a method here:
/// docs/migrating.md maps them.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let locks = service.locks();
/// let guard = locks.acquire("jobs", "rebuild-index", Duration::from_secs(30)).await?.expect("free");
/// assert!(guard.is_held());
/// locks.release("jobs", "rebuild-index").await?;
/// assert!(!guard.is_held());
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Locks<'a> {
    service: &'a LeaseService,
}

impl LeaseService {
    /// The handle on this service's named locks: see [`Locks`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.locks().acquire("jobs", "a", leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(guard.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn locks(&self) -> Locks<'_> {
        Locks { service: self }
    }
}

impl<'a> Locks<'a> {
    /// Read-write locks: readers share, a writer is alone. See [`ReadWriteLocks`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let reader = service.locks().read_write().acquire_shared("ns", "a", leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(reader.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn read_write(&self) -> ReadWriteLocks<'a> {
        ReadWriteLocks { locks: *self }
    }

    /// Fair locks: waiters served in the order they arrived, across processes. See
    /// [`FairLocks`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.locks().fair().acquire_within("ns", "a", None, leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(guard.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn fair(&self) -> FairLocks<'a> {
        FairLocks { locks: *self }
    }

    /// Semaphores: `N` permits of a name. See [`Semaphores`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let permit = service.locks().permits().acquire("ns", "pool", 3, leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(permit.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn permits(&self) -> Semaphores<'a> {
        Semaphores { locks: *self }
    }

    /// Several locks all or nothing. See [`AllLocks`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let both = service.locks().all().attempt("ns", &["a", "b"], leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(both.into_guard().is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn all(&self) -> AllLocks<'a> {
        AllLocks { locks: *self }
    }

    /// This process's fair queue per lock: the lock family's own state in the service.
    pub(crate) fn queues(&self) -> std::sync::Arc<LockQueues> {
        self.service.extension::<LockQueues>()
    }
}

/// What went wrong releasing or renewing a lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The tenure had already ended (expired, or taken over by another holder) before the
    /// release or renewal: work done under it may have overlapped another holder's.
    #[error("the lock {key} (token {token}) was lost before it was released")]
    LockLost {
        /// The lock.
        key: LeaseKey,
        /// The tenure that was lost.
        token: FencingToken,
    },
    /// This service holds no such lock (never taken, or already unlocked); nothing was changed.
    #[error("this holder does not hold the lock {key}")]
    NotHeld {
        /// The lock.
        key: LeaseKey,
    },
    /// The service failed (bad name, database error, shut down).
    #[error(transparent)]
    Service(#[from] Error),
}

/// The answer of one attempt, [`Locks::attempt`].
#[derive(Debug)]
#[non_exhaustive]
pub enum LockOutcome {
    /// The lock is ours.
    Acquired(LockGuard),
    /// Another holder has it.
    HeldBy {
        /// Who.
        holder: HolderId,
        /// Their tenure's token.
        token: FencingToken,
        /// When their grant ends, by the database's clock.
        until: DbInstant,
    },
    /// Another task of this service holds it, or is asking the database for it.
    HeldLocally,
}

impl LockOutcome {
    /// The guard, if acquired.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let outcome = service.locks().attempt("ns", "a", std::time::Duration::from_secs(10)).await?;
    /// assert!(outcome.into_guard().is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn into_guard(self) -> Option<LockGuard> {
        match self {
            LockOutcome::Acquired(g) => Some(g),
            _ => None,
        }
    }
}

/// The configuration of a lock of `ttl`: its term is the ttl, its requests are bounded by the
/// service's request timeout (at most a third of the ttl). A plain lock is renewed only on
/// request, so any ttl of at least 1 ms is accepted (see
/// [`LeaseConfig::with_renewed_on_request`]); its safety margin is a tenth of the ttl, as for
/// leases, but below 1 ms for a ttl under 10 ms (the margin covers the clocks' rates over one
/// ttl, which for such a ttl is far below a millisecond). A hold ([`hold_config`]) is renewed by
/// itself and keeps every check.
pub(crate) fn lock_config(ttl: Duration, request_timeout: Duration) -> Result<LeaseConfig> {
    let ttl_term = Term::new("ttl", ttl)?;
    let ttl = ttl_term.duration();
    let min = leasehold_core::config::MIN_INTERVAL;
    let renew = (ttl / 3).max(min);
    let mut config = LeaseConfig::default()
        .with_term(ttl)
        .with_retry_interval((renew / 2).max(min))
        .with_request_timeout(request_timeout.min(renew))
        .with_renewed_on_request(true);
    if config.safety_margin() >= ttl {
        config = config.with_safety_margin(ttl / 10);
    }
    checked(config, ttl, "a lock")
}

/// The configuration of a hold of `ttl`: [`lock_config`], renewed by itself every ttl/3, so the
/// renewals' checks apply too.
pub(crate) fn hold_config(ttl: Duration, request_timeout: Duration) -> Result<LeaseConfig> {
    let config = lock_config(ttl, request_timeout)?.with_renewed_on_request(false);
    checked(config, ttl, "a hold (renewed every ttl/3)")
}

fn checked(config: LeaseConfig, ttl: Duration, what: &str) -> Result<LeaseConfig> {
    config.validate().map_err(|e| {
        Error::Invalid(ValidationError::Relation {
            field: "ttl",
            reason: format!("{ttl:?} is too short for {what}: {e}"),
        })
    })?;
    Ok(config)
}
