//! Permits held in the background ([`Semaphores::hold`](crate::locks::Semaphores::hold), [`HeldPermit`]): a permit of a
//! semaphore whose lock's lease actor renews it by itself, as [`Locks::hold`](super::Locks::hold) does for a lock;
//! whether one is live ([`Semaphores::is_holding`](crate::locks::Semaphores::is_holding)) and its release by name
//! ([`Semaphores::release`](crate::locks::Semaphores::release)).
//!
//! # One tenure, no second try
//! A held permit is the permit's own lock actor switched to automatic renewal (every ttl/3),
//! so the engine renews it with every other tenure and its machine decides when it ends. Unlike
//! a held lock it does not compete again after a loss: the actor stops once the tenure has ended
//! and settled. A slot is only ever taken by [`Semaphores::hold`](crate::locks::Semaphores::hold) or
//! [`Semaphores::acquire`](crate::locks::Semaphores::acquire), which check the semaphore's count before and after the grant; a
//! slot retaken by itself would skip that check.

use std::sync::Arc;
use std::time::Duration;

use actix::Addr;
use leasehold_core::derived::{DerivedKey, KeyRole};
use leasehold_core::{FencingToken, LeaseKey, LeaseName};
use leasehold_engine::{Belief, LeaseActor, MakeHold};
use tokio_util::sync::CancellationToken;

use super::Semaphores;
use super::release::release;
use super::{LockError, hold_config};
use crate::Result;

/// A permit of a semaphore renewed by the service's engine, from [`Semaphores::hold`](crate::locks::Semaphores::hold): its
/// index, the semaphore's count, its tenure's fencing token and belief.
///
/// # Lifecycle
/// The permit belongs to the service, not to this handle: dropping the handle keeps it held
/// (and renewed). It ends on [`HeldPermit::release`] or [`Semaphores::release`](crate::locks::Semaphores::release) (released
/// at once), on [`crate::LeaseService::shutdown`] or when the last `LeaseService` is dropped,
/// or at its local deadline when renewals fail (lost: [`HeldPermit::is_held`] turns false and
/// its cancellation token is cancelled at that instant). A lost permit is not taken again by
/// itself: ask again with [`Semaphores::hold`](crate::locks::Semaphores::hold).
///
/// # Examples
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
/// let locks = service.locks();
/// let ttl = Duration::from_secs(30);
/// let permit = locks.permits().hold("crawl", "fetchers", 2, ttl).await?.expect("free");
/// let cancelled = permit.cancellation_token();
/// assert!(permit.is_held() && permit.index() < 2 && locks.permits().is_holding("crawl", "fetchers"));
/// // ... work until `cancelled` fires, or until done ...
/// permit.release().await?;
/// assert!(cancelled.is_cancelled() && !locks.permits().is_holding("crawl", "fetchers"));
/// # service.shutdown().await?; Ok(()) }
/// ```
#[derive(Debug)]
pub struct HeldPermit {
    index: u32,
    permits: u32,
    key: LeaseKey,
    token: FencingToken,
    ttl: Duration,
    /// The bound of the wait for a release's answer (the service's request timeout).
    limit: Duration,
    actor: Addr<LeaseActor>,
    belief: Arc<Belief>,
}

impl HeldPermit {
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

    /// This permit's tenure's fencing token: renewals keep it, each new tenure of the same
    /// permit gets a larger one.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The permit's own lock, `{name}#permit:{index}/{permits}` in the semaphore's namespace
    /// (to fence with [`Locks::begin_fenced`](super::Locks::begin_fenced), or to find its row in a listing).
    #[must_use]
    pub fn key(&self) -> &LeaseKey {
        &self.key
    }

    /// The permit's ttl: each renewal extends it to this from then, by the database's clock.
    #[must_use]
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether this permit is held now: its tenure is its actor's live one and the local clock
    /// is before its deadline (moved by every renewal). False once released, lost, or the
    /// service shut down or dropped; it agrees with [`HeldPermit::cancellation_token`] and
    /// [`Semaphores::is_holding`](crate::locks::Semaphores::is_holding). Memory only.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.belief.holds_token(self.token)
    }

    /// The tenure's one belief signal: cancelled the instant it ends here (at the local
    /// deadline, on release before the release is sent, at shutdown, or when the service is
    /// dropped). Already cancelled if it has ended.
    #[must_use]
    pub fn cancellation_token(&self) -> CancellationToken {
        self.belief.cancellation_of(self.token)
    }

    /// Whether the tenure ended because it was given up here (released by handle or by name)
    /// rather than lost.
    /// The local deadline of the permit's tenure on the monotonic clock, renewed with it;
    /// `None` once it has ended.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let permit = service.locks().permits().hold("crawl", "fetchers", 2, std::time::Duration::from_secs(30)).await?.expect("free");
    /// assert!(permit.deadline().is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.belief.deadline_of(self.token)
    }

    pub(crate) fn was_given_up(&self) -> bool {
        self.belief.was_given_up(self.token)
    }

    /// Releases the permit and waits for the database's answer: the tenure ends here first
    /// (its token is cancelled before the release is sent), and the slot is free for any holder
    /// once this returns `Ok`.
    ///
    /// # Errors
    /// [`LockError::LockLost`] if the tenure had already ended (its local deadline passed, or
    /// the database said it was over: work done under it may have overlapped another holder's);
    /// [`LockError::NotHeld`] if it was already released through [`Semaphores::release`](crate::locks::Semaphores::release);
    /// [`LockError::Service`] when the database failed or did not answer within the request
    /// timeout (the permit then lapses after its ttl).
    ///
    /// # Cancel safety
    /// The tenure ends and the release is sent before the first await: dropping the future
    /// only stops waiting.
    pub async fn release(self) -> Result<(), LockError> {
        release(
            self.limit,
            &self.actor,
            &self.belief,
            &self.key,
            self.token,
            None,
        )
        .await
    }
}

impl Semaphores<'_> {
    /// Takes a permit of the semaphore `namespace`/`name` with `permits` permits (one attempt
    /// over the free ones, as [`Semaphores::acquire`](crate::locks::Semaphores::acquire)) and, if it got one, keeps it: the
    /// permit's lock actor switches to automatic renewal (every ttl/3) until it is released,
    /// lost, or the service shuts down. `None` when all permits are held, or when the permit
    /// granted ended before it could be kept (a ttl close to the round trip; what is left is
    /// released). Each call takes another permit (a service may hold several); see
    /// [`HeldPermit`] for its lifecycle.
    ///
    /// # Examples
    /// See [`HeldPermit`].
    ///
    /// # Errors
    /// [`crate::Error::PermitsMismatch`] when a live permit of another count exists;
    /// [`crate::Error::Invalid`] for a bad namespace or name, `permits == 0`, or a ttl too short
    /// for renewals (as [`Locks::hold`](super::Locks::hold)); [`crate::Error::Store`]; [`crate::Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped before the answer, nothing is kept: a permit granted before or after the drop is
    /// released.
    pub async fn hold(
        self,
        namespace: &str,
        name: &str,
        permits: u32,
        ttl: Duration,
    ) -> Result<Option<HeldPermit>> {
        let base = LeaseKey::parse(namespace, name)?;
        let config = hold_config(ttl, self.locks.service.request_timeout())?;
        let Some(permit) = self.take_permit(&base, permits, config).await? else {
            return Ok(None);
        };
        let msg = MakeHold {
            key: permit.guard.key().clone(),
            compete_after_loss: false,
        };
        // Until the actor is a hold, the guard releases the permit if this future is dropped.
        if !self.locks.service.engine().send(msg).await? {
            // Its tenure ended in between (a ttl close to the round trip): the guard releases
            // what is left.
            return Ok(None);
        }
        let guard = permit.guard;
        guard.disarm();
        let (actor, belief, limit) = guard.tenure_parts();
        Ok(Some(HeldPermit {
            index: permit.index,
            permits: permit.permits,
            key: guard.key().clone(),
            token: guard.token(),
            ttl: guard.ttl(),
            limit,
            actor,
            belief,
        }))
    }

    /// Whether this service holds a permit (any) of the semaphore `namespace`/`name` now:
    /// memory only, false at the local deadline when renewals fail, agreeing with each
    /// [`HeldPermit::is_held`]. A permit taken with [`Semaphores::acquire`](crate::locks::Semaphores::acquire) counts too.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// assert!(!locks.permits().is_holding("crawl", "fetchers"));
    /// let _permit = locks.permits().hold("crawl", "fetchers", 4, std::time::Duration::from_secs(30)).await?;
    /// assert!(locks.permits().is_holding("crawl", "fetchers"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn is_holding(&self, namespace: &str, name: &str) -> bool {
        let Ok(base) = LeaseName::parse(name) else {
            return false;
        };
        let prefix = DerivedKey::prefix(&base, KeyRole::Permit);
        self.locks
            .service
            .registry()
            .held_with_prefix(namespace, &prefix)
            .is_some()
    }

    /// Releases permit `index` of the semaphore `namespace`/`name` held by this service (from
    /// [`Semaphores::hold`](crate::locks::Semaphores::hold) or [`Semaphores::acquire`](crate::locks::Semaphores::acquire)), whatever its count, and waits for
    /// the database's answer; its [`HeldPermit`], if still around, then answers
    /// [`LockError::NotHeld`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::LockError;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let permit = locks.permits().hold("crawl", "fetchers", 2, std::time::Duration::from_secs(30)).await?.expect("free");
    /// locks.permits().release("crawl", "fetchers", permit.index()).await?;
    /// assert!(!permit.is_held());
    /// assert!(matches!(permit.release().await, Err(LockError::NotHeld { .. })));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::NotHeld`] (naming the semaphore) when this service holds no live tenure of
    /// that permit (never
    /// taken, released, or already ended: a held permit's actor stops once its tenure has ended,
    /// so a lost one is reported by [`HeldPermit::release`] as [`LockError::LockLost`], not
    /// here); otherwise as [`Locks::release`](super::Locks::release).
    ///
    /// # Cancel safety
    /// As [`Locks::release`](super::Locks::release).
    pub async fn release(self, namespace: &str, name: &str, index: u32) -> Result<(), LockError> {
        let semaphore = LeaseKey::parse(namespace, name).map_err(crate::Error::from)?;
        // The count is part of the permit's lock name: the live permit of that index names it.
        let prefix = DerivedKey::permit_index_prefix(&semaphore.name, index);
        let Some(lock) = self
            .locks
            .service
            .registry()
            .held_with_prefix(namespace, &prefix)
        else {
            return Err(LockError::NotHeld { key: semaphore });
        };
        self.locks
            .release_key(LeaseKey::new(semaphore.namespace.clone(), lock))
            .await
    }
}
