//! Re-entry by an explicit owner ([`Locks::owned_by`] → [`OwnedLocks`], [`ReentrantGuard`]):
//! a lock taken for an owner can be taken again by the same owner without waiting, while every
//! other owner (of this service or any other) is excluded as before.
//!
//! The owner is a name the caller gives (a job id, a request id), not the thread or task: an
//! async task moves between threads and may hand its work to other tasks, so neither identifies
//! who holds a lock. Every guard of one owner shares one tenure (one lease actor, one fencing
//! token, one belief): re-entry adds a handle, never a second grant, so nothing here keeps a
//! deadline or a "held" flag of its own. The tenure is released when the owner's last guard is
//! unlocked or dropped.

use std::ops::Deref;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use leasehold_core::LeaseKey;

use super::{LockError, LockGuard, Locks, lock_config};
use crate::Result;

/// The longest owner name, in bytes (a name, not a payload).
const MAX_OWNER: usize = 255;

/// One owner's tenure of one lock, shared by its guards.
#[derive(Debug)]
pub(crate) struct Shared {
    owner: Arc<str>,
    guard: LockGuard,
}

/// The tenures of this service's owners, by lock: only one tenure per key per service exists,
/// so one entry per key is enough.
#[derive(Debug, Default)]
pub(crate) struct Owners {
    held: DashMap<LeaseKey, Weak<Shared>>,
}

impl Owners {
    /// The live tenure of `key` if `owner` holds it.
    fn live(&self, key: &LeaseKey, owner: &str) -> Option<Arc<Shared>> {
        let shared = self.held.get(key)?.upgrade()?;
        (*shared.owner == *owner && shared.guard.is_held()).then_some(shared)
    }

    fn insert(&self, key: LeaseKey, shared: &Arc<Shared>) {
        if self.held.len() > 1024 {
            self.held.retain(|_, s| s.strong_count() > 0);
        }
        self.held.insert(key, Arc::downgrade(shared));
    }
}

impl<'a> Locks<'a> {
    /// The locks of `owner` in this service: a lock `owner` holds is taken again by `owner` at
    /// once, sharing the tenure; other owners wait or are refused as for any lock.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let job = service.locks().owned_by("job-42")?;
    /// let outer = job.acquire("ledger", "accounts", Duration::from_secs(30)).await?.expect("free");
    /// // the same owner, deeper in its work: no wait, the same tenure
    /// let inner = job.acquire("ledger", "accounts", Duration::from_secs(30)).await?.expect("ours");
    /// assert_eq!(inner.token(), outer.token());
    /// // another owner of the same service is excluded
    /// let other = service.locks().owned_by("job-43")?;
    /// assert!(other.acquire("ledger", "accounts", Duration::from_secs(30)).await?.is_none());
    /// inner.unlock().await?; // the owner still holds it through `outer`
    /// assert!(outer.is_held());
    /// outer.unlock().await?; // the last guard: released
    /// assert!(other.acquire("ledger", "accounts", Duration::from_secs(30)).await?.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] when `owner` is empty or longer than 255 bytes.
    pub fn owned_by(&self, owner: &str) -> Result<OwnedLocks<'a>> {
        use leasehold_core::ValidationError;
        if owner.is_empty() {
            return Err(ValidationError::Empty { field: "owner" }.into());
        }
        if owner.len() > MAX_OWNER {
            return Err(ValidationError::TooLong {
                field: "owner",
                len: owner.len(),
                max: MAX_OWNER,
            }
            .into());
        }
        Ok(OwnedLocks {
            locks: *self,
            owner: owner.into(),
        })
    }
}

/// The locks of one owner of a service, from [`Locks::owned_by`]: re-entrant by that owner.
///
/// # What re-entry promises
/// - `acquire`/`acquire_within` by an owner that holds the lock return at once a new
///   [`ReentrantGuard`] on the same tenure: same fencing token, same cancellation token, no
///   statement sent. The `ttl` of a re-entry is checked but not applied: the tenure keeps the
///   ttl it was taken with.
/// - The tenure ends for every guard of the owner at once (its deadline, a loss, a release by
///   name with [`Locks::release`], shutdown): all their `is_held` turn false together.
/// - It is released when the owner's last guard is unlocked or dropped; unlocking an earlier
///   one only gives that handle up.
/// - Other owners of this service are excluded like other tasks ([`Locks::acquire`] answers
///   `None`, [`Locks::acquire_within`] queues), and other services like other holders.
/// - An owner's first acquisitions made concurrently (none of them holding yet) queue like any
///   two tasks: re-entry is by an owner that already holds the lock.
/// - Owners are names within one service: another service using the same owner name is another
///   holder.
#[derive(Debug, Clone)]
pub struct OwnedLocks<'a> {
    locks: Locks<'a>,
    owner: Arc<str>,
}

impl OwnedLocks<'_> {
    /// The owner.
    #[must_use]
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// One attempt to take the lock for this owner: at once when the owner holds it; else as
    /// [`Locks::acquire`] (`None` when anyone else holds it).
    ///
    /// # Errors
    /// As [`Locks::acquire`].
    ///
    /// # Cancel safety
    /// As [`Locks::acquire`].
    pub async fn acquire(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<ReentrantGuard>> {
        if let Some(again) = self.reenter(namespace, name, ttl)? {
            return Ok(Some(again));
        }
        let guard = self.locks.acquire(namespace, name, ttl).await?;
        Ok(guard.map(|g| self.register(g)))
    }

    /// Takes the lock for this owner: at once when the owner holds it; else as
    /// [`Locks::acquire_within`], waiting up to `wait` (`None`: forever).
    ///
    /// # Errors
    /// As [`Locks::acquire_within`].
    ///
    /// # Cancel safety
    /// As [`Locks::acquire_within`].
    pub async fn acquire_within(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<ReentrantGuard>> {
        if let Some(again) = self.reenter(namespace, name, ttl)? {
            return Ok(Some(again));
        }
        let guard = self
            .locks
            .acquire_within(namespace, name, wait, ttl)
            .await?;
        Ok(guard.map(|g| self.register(g)))
    }

    /// A new handle on the owner's live tenure of the lock, if it has one; the name and ttl are
    /// checked either way.
    fn reenter(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<ReentrantGuard>> {
        let key = LeaseKey::parse(namespace, name)?;
        lock_config(ttl, self.locks.service.request_timeout())?;
        Ok(self
            .locks
            .service
            .locks()
            .queues()
            .owners()
            .live(&key, &self.owner)
            .map(|shared| ReentrantGuard { shared }))
    }

    fn register(&self, guard: LockGuard) -> ReentrantGuard {
        let key = guard.key().clone();
        let shared = Arc::new(Shared {
            owner: Arc::clone(&self.owner),
            guard,
        });
        self.locks
            .service
            .locks()
            .queues()
            .owners()
            .insert(key, &shared);
        ReentrantGuard { shared }
    }
}

/// One owner's handle on a lock it holds ([`OwnedLocks::acquire`]): every [`LockGuard`] method
/// that reads or uses the tenure (`token`, `is_held`, `cancellation_token`, `renew`,
/// `begin_fenced`, …) through `Deref`, shared by all the owner's guards of that lock. The
/// tenure is released when the owner's last guard is unlocked ([`ReentrantGuard::unlock`]) or
/// dropped (then in the background, as a [`LockGuard`]'s drop).
#[derive(Debug)]
pub struct ReentrantGuard {
    shared: Arc<Shared>,
}

impl ReentrantGuard {
    /// The owner.
    #[must_use]
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    /// How many guards of the owner share this tenure (this one included).
    #[must_use]
    pub fn depth(&self) -> usize {
        Arc::strong_count(&self.shared)
    }

    /// Gives this handle up; the owner's last one releases the lock and waits for the
    /// database's answer.
    ///
    /// # Errors
    /// [`LockError::LockLost`] if the tenure had already ended (whichever guard is unlocked:
    /// work done under it may have overlapped another holder's); for the last guard, as
    /// [`LockGuard::unlock`].
    ///
    /// # Cancel safety
    /// As [`LockGuard::unlock`].
    pub async fn unlock(self) -> Result<(), LockError> {
        let live = self.shared.guard.is_held();
        let lost = LockError::LockLost {
            key: self.shared.guard.key().clone(),
            token: self.shared.guard.token(),
        };
        // Exactly one of the owner's guards, the last, gets the tenure back.
        match Arc::into_inner(self.shared) {
            Some(last) => last.guard.unlock().await,
            None if live => Ok(()),
            None => Err(lost),
        }
    }
}

impl Deref for ReentrantGuard {
    type Target = LockGuard;

    fn deref(&self) -> &LockGuard {
        &self.shared.guard
    }
}
