//! Semaphores: a lock with `N` permits, at most `N` holders at once, each with its own fencing
//! token ([`Semaphores::acquire`](crate::locks::Semaphores::acquire), [`Semaphores::acquire_within`](crate::locks::Semaphores::acquire_within), [`PermitGuard`]);
//! Redisson's `RPermitExpirableSemaphore`.
//!
//! # On the plain lock table
//! Permit `i` of the semaphore `name` with `N` permits is the plain lock
//! `{name}#permit:{i}/{N}` (a reserved name scheme in the same namespace). Taking a permit lists
//! the held permits (one prefix query), then tries the free ones, in random order, each as a
//! plain lock (one attempt each, through the engine's lock actors: the machine decides each
//! permit's tenure, belief is the permit's guard). So every guarantee of a plain lock holds per
//! permit, and since there are only `N` rows, at most `N` tenures are live at once.
//!
//! # Different `N`s
//! Two processes asking for one semaphore with different counts would use different rows and
//! could together exceed both counts. Refused: a request that finds a live permit of another
//! count, before or **after** its own grant, answers [`Error::PermitsMismatch`] (releasing what
//! it just took). Of two grants with different counts, the later one's check (made after its
//! commit) sees the earlier one while it is live, so the two are never believed together. Change
//! `N` by letting every permit of the old count lapse or be released first.

use std::time::Duration;

use leasehold_core::derived::{DerivedKey, KeyRole};
use leasehold_core::{FencingToken, LeaseConfig, LeaseKey, ValidationError};
use rand::seq::SliceRandom;
use tokio_util::sync::CancellationToken;

use super::{LockError, LockGuard, LockOutcome, Locks, lock_config};
use crate::{Error, Result};

/// One held permit of a semaphore, from [`Semaphores::acquire`](crate::locks::Semaphores::acquire): a plain [`LockGuard`] on
/// the permit's own lock, with its own tenure and fencing token.
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let locks = service.locks();
/// let ttl = Duration::from_secs(30);
/// let one = locks.permits().acquire("crawl", "fetchers", 2, ttl).await?.expect("free");
/// let two = locks.permits().acquire("crawl", "fetchers", 2, ttl).await?.expect("free");
/// assert_ne!(one.index(), two.index());
/// assert!(locks.permits().acquire("crawl", "fetchers", 2, ttl).await?.is_none()); // both taken
/// assert!(matches!(
///     locks.permits().acquire("crawl", "fetchers", 3, ttl).await,
///     Err(leasehold::Error::PermitsMismatch { found: 2, .. })
/// ));
/// one.unlock().await?;
/// assert!(locks.permits().acquire("crawl", "fetchers", 2, ttl).await?.is_some());
/// # drop(two); service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct PermitGuard {
    pub(super) index: u32,
    pub(super) permits: u32,
    pub(super) guard: LockGuard,
}

impl PermitGuard {
    /// Which permit (from 0 to `permits - 1`).
    #[must_use]
    pub fn index(&self) -> u32 {
        self.index
    }

    /// How many permits the semaphore has.
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// This permit's tenure's fencing token (each permit's grows on its own).
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// Whether this permit is held now: see [`LockGuard::is_held`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Cancelled the instant this permit's tenure ends: see [`LockGuard::cancellation_token`].
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.guard.cancellation_token()
    }

    /// The permit's lock guard (renew it, fence with it).
    #[must_use]
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// The permit's lock guard, for good (the permit is its lock: `guard.key()` names it).
    #[must_use]
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// Releases the permit and waits for the answer: see [`LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`LockGuard::unlock`].
    pub async fn unlock(self) -> Result<(), LockError> {
        self.guard.unlock().await
    }
}

/// The semaphores of one service, from [`Locks::permits`]: `N` permits of a name on `N`
/// plain locks, taken once ([`Semaphores::acquire`]) or held in the background
/// ([`Semaphores::hold`]).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let permits = service.locks().permits();
/// let one = permits.acquire("crawl", "fetchers", 2, std::time::Duration::from_secs(30)).await?;
/// assert!(one.is_some() && permits.is_holding("crawl", "fetchers"));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Semaphores<'a> {
    pub(super) locks: Locks<'a>,
}

impl Semaphores<'_> {
    /// One attempt to take a permit of the semaphore `namespace`/`name` with `permits` permits
    /// for `ttl`: `None` when all are held (by this service's tasks or others). See the module
    /// docs for the rows used and the guarantees.
    ///
    /// # Examples
    /// See [`PermitGuard`].
    ///
    /// # Errors
    /// [`Error::PermitsMismatch`] when a live permit of another count exists;
    /// [`Error::Invalid`] for a bad namespace, name (with its permit suffix within the column
    /// size), ttl, or `permits == 0`; otherwise as [`Locks::attempt`].
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`]: a permit granted after the future was dropped is released.
    pub async fn acquire(
        self,
        namespace: &str,
        name: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Option<PermitGuard>> {
        let base = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        self.take_permit(&base, permits, config).await
    }

    /// One attempt at a permit, each permit's lock taken with `config` (a lock's or a hold's).
    /// `base` is a user's semaphore or a derived one (a read-write lock's read slots).
    pub(super) async fn take_permit(
        self,
        base: &LeaseKey,
        permits: u32,
        config: LeaseConfig,
    ) -> Result<Option<PermitGuard>> {
        if permits == 0 {
            return Err(Error::Invalid(ValidationError::Relation {
                field: "permits",
                reason: "a semaphore needs at least one permit".into(),
            }));
        }
        DerivedKey::permit(base, permits - 1, permits)?;
        let held = self.held_permits(base, permits).await?;
        let mut free: Vec<u32> = (0..permits).filter(|i| !held.contains(i)).collect();
        free.shuffle(&mut rand::rng());
        for index in free {
            let permit = DerivedKey::permit(base, index, permits)?;
            let guard = match self.locks.attempt_key(&permit, config.clone()).await? {
                LockOutcome::Acquired(guard) => guard,
                _ => continue,
            };
            // After the commit: a live permit of another count now means the two counts
            // overlap; this grant gives way.
            if let Err(e) = self.held_permits(base, permits).await {
                drop(guard);
                return Err(e);
            }
            return Ok(Some(PermitGuard {
                index,
                permits,
                guard,
            }));
        }
        Ok(None)
    }

    /// Takes a permit of the semaphore, waiting up to `wait` (`None`: forever) while all are
    /// held, with the backoff of [`Locks::acquire_within`]; `None` if the wait ran out.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let ttl = Duration::from_secs(30);
    /// let only = service.locks().permits().acquire_within("ns", "one", 1, None, ttl).await?.expect("free");
    /// let waited = service.locks().permits().acquire_within("ns", "one", 1, Some(Duration::from_millis(50)), ttl).await?;
    /// assert!(waited.is_none() && only.is_held());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Semaphores::acquire`](crate::locks::Semaphores::acquire).
    ///
    /// # Cancel safety
    /// As [`Semaphores::acquire`](crate::locks::Semaphores::acquire); returns within `wait` (plus scheduling).
    pub async fn acquire_within(
        self,
        namespace: &str,
        name: &str,
        permits: u32,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<PermitGuard>> {
        let base = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.locks.service.request_timeout())?;
        let clock = std::sync::Arc::clone(self.locks.service.registry().clock());
        let give_up = wait.map(|w| clock.now() + w);
        let retry = self.locks.queues().retry();
        let mut backoff = retry;
        loop {
            let attempt = self.take_permit(&base, permits, config.clone());
            let got = match give_up {
                Some(at) => match tokio::time::timeout_at(at, attempt).await {
                    Ok(got) => got?,
                    Err(_) => return Ok(None),
                },
                None => attempt.await?,
            };
            if got.is_some() {
                return Ok(got);
            }
            let now = clock.now();
            if give_up.is_some_and(|at| now >= at) {
                return Ok(None);
            }
            let jitter = rand::RngExt::random_range(&mut rand::rng(), 0.75..1.25);
            let mut pause = backoff.mul_f64(jitter);
            if let Some(at) = give_up {
                pause = pause.min(at.saturating_duration_since(now));
            }
            backoff = (backoff * 2).min(retry * 8);
            tokio::time::sleep(pause).await;
        }
    }

    /// The indices of the live permits of `base` with `permits` permits (by the database's
    /// clock); [`Error::PermitsMismatch`] if a live permit of another count exists.
    async fn held_permits(self, base: &LeaseKey, permits: u32) -> Result<Vec<u32>> {
        let prefix = DerivedKey::prefix(&base.name, KeyRole::Permit);
        let rows = self
            .locks
            .held_with_prefix(base.namespace.as_str(), &prefix)
            .await?;
        let mut held = Vec::new();
        for row in rows {
            let Some(rest) = row.key.name.as_str().strip_prefix(&prefix) else {
                continue;
            };
            let Some((i, n)) = rest.split_once('/') else {
                continue;
            };
            let (Ok(i), Ok(n)) = (i.parse::<u32>(), n.parse::<u32>()) else {
                continue;
            };
            if n != permits {
                return Err(Error::PermitsMismatch {
                    key: base.clone(),
                    asked: permits,
                    found: n,
                });
            }
            held.push(i);
        }
        Ok(held)
    }
}
