//! Named locks with a ttl on the lease engine: the seeds' `lock`, `tryLocker`, `unlock`,
//! `holdLock`, `hasHoldLock`, `queryLockedInstanceByNamePrefix`, PowerJob's `tryLock`/`unlock`,
//! ShedLock's `lockAtLeastFor` and Spring's `JdbcLockRegistry`.
//!
//! # A lock is a lease
//! Every lock is a lease actor of the engine, driven by the same [`LeaseMachine`] as a lease
//! task, in its lock mode: one attempt (a refusal says who holds it), renewal only on request
//! ([`LockGuard::renew`]), released on unlock (keeping a minimum hold with
//! [`LockGuard::lock_at_least_for`]). Its local deadline is `send time + ttl − margin`
//! (margin ttl/10, at most 2 s), as for any lease; at that instant [`LockGuard::is_held`] turns
//! false and the guard's cancellation token is cancelled. [`LeaseService::hold_lock`] switches
//! the same actor to automatic renewal. Nothing else keeps a deadline.
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

mod guard;
mod hold;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use leasehold_core::{
    DbInstant, FencingToken, HolderId, LeaseConfig, LeaseKey, Term, ValidationError,
};
use leasehold_engine::{Attempt, EngineError, KeepUntilStopped, Owner, TakeLock};
use tokio::sync::{OwnedMutexGuard, oneshot};

pub use guard::LockGuard;

use crate::{Error, LeaseService, Result};

/// The ttl of a lock when none is given: 5 minutes, the seeds' default.
pub const DEFAULT_LOCK_TTL: Duration = Duration::from_secs(300);
/// The namespace of [`LeaseService::try_lock`] and [`LeaseService::unlock_default`].
pub const DEFAULT_LOCK_NAMESPACE: &str = "lock";
/// The first wait between attempts of [`LeaseService::try_locker`] (Spring's
/// `idleBetweenTries`).
pub const DEFAULT_LOCK_RETRY_INTERVAL: Duration = Duration::from_millis(100);

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

/// The answer of one attempt, [`LeaseService::lock_outcome`].
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
    /// let outcome = service.lock_outcome("ns", "a", std::time::Duration::from_secs(10)).await?;
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

type Queue = Arc<tokio::sync::Mutex<()>>;

/// Per-service lock state: the local queues (the engine's book has the locks themselves).
#[derive(Debug)]
pub(crate) struct LocalLocks {
    queues: DashMap<LeaseKey, Weak<tokio::sync::Mutex<()>>>,
    retry_millis: AtomicU64,
}

impl Default for LocalLocks {
    fn default() -> Self {
        Self {
            queues: DashMap::new(),
            retry_millis: AtomicU64::new(millis(DEFAULT_LOCK_RETRY_INTERVAL)),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl LocalLocks {
    fn queue(&self, key: &LeaseKey) -> Queue {
        if self.queues.len() > 1024 {
            self.queues.retain(|_, q| q.strong_count() > 0);
        }
        let mut entry = self.queues.entry(key.clone()).or_default();
        if let Some(q) = entry.upgrade() {
            return q;
        }
        let q = Arc::new(tokio::sync::Mutex::new(()));
        *entry = Arc::downgrade(&q);
        q
    }

    fn retry(&self) -> Duration {
        Duration::from_millis(self.retry_millis.load(Ordering::Relaxed))
    }
}

/// The configuration of a lock of `ttl`: its term is the ttl, its requests are bounded by the
/// service's request timeout (at most a third of the ttl).
pub(crate) fn lock_config(ttl: Duration, request_timeout: Duration) -> Result<LeaseConfig> {
    let ttl_term = Term::new("ttl", ttl)?;
    let min = leasehold_core::config::MIN_INTERVAL;
    let renew = (ttl_term.duration() / 3).max(min);
    let config = LeaseConfig::default()
        .with_term(ttl_term.duration())
        .with_retry_interval((renew / 2).max(min))
        .with_request_timeout(request_timeout.min(renew));
    config.validate().map_err(|e| {
        Error::Invalid(ValidationError::Relation {
            field: "ttl",
            reason: format!("{ttl:?} is too short for a lock: {e}"),
        })
    })?;
    Ok(config)
}

/// What one attempt came to, with the local queue's permit when it was not used up.
pub(crate) type Tried = (LockOutcome, Option<OwnedMutexGuard<()>>);

impl LeaseService {
    /// Sets the first wait between attempts of [`LeaseService::try_locker`] (default 100 ms).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// service.set_lock_retry_interval(std::time::Duration::from_millis(20));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn set_lock_retry_interval(&self, interval: Duration) {
        self.locks()
            .retry_millis
            .store(millis(interval), Ordering::Relaxed);
    }

    /// One attempt to take the lock `namespace`/`name` for `ttl`, returning at once; `None` when
    /// someone else holds it (see [`LeaseService::lock_outcome`] for who). Replaces the seeds'
    /// `ILeaseService.lock(name, lockName, lockTimeSecond)` (default ttl there:
    /// [`DEFAULT_LOCK_TTL`]).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("jobs", "rebuild-index", leasehold::DEFAULT_LOCK_TTL).await?;
    /// assert!(guard.is_some());
    /// // held (by this service's other task, here): one attempt, no wait
    /// assert!(service.lock("jobs", "rebuild-index", Duration::from_secs(5)).await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace, name or ttl (one too short for a lock: under
    /// 6 ms); [`Error::KeyInUse`] when a lease task, a hold or sharded names of this service use
    /// the key; [`Error::Store`] when the attempt failed or got no answer within the request
    /// timeout (a grant it may have made is released); [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the attempt runs on the engine thread; if the future is dropped, a grant
    /// that arrives anyway (even one whose answer was already waiting) is released at once, and
    /// the local queue's place is given back. Returns within the request timeout.
    pub async fn lock(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        Ok(self.lock_outcome(namespace, name, ttl).await?.into_guard())
    }

    /// Like [`LeaseService::lock`], telling who holds the lock when it is not ours.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use leasehold::{LeaseService, LockOutcome, MemoryStore};
    /// let store = Arc::new(MemoryStore::new());
    /// let a = LeaseService::from_store(store.clone()).build().await?;
    /// let b = LeaseService::from_store(store).build().await?;
    /// let _guard = a.lock("jobs", "x", Duration::from_secs(30)).await?;
    /// match b.lock_outcome("jobs", "x", Duration::from_secs(30)).await? {
    ///     LockOutcome::HeldBy { holder, .. } => assert_eq!(&holder, a.holder()),
    ///     other => panic!("{other:?}"),
    /// }
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LeaseService::lock`].
    pub async fn lock_outcome(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<LockOutcome> {
        let key = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.request_timeout())?;
        let Ok(permit) = self.locks().queue(&key).try_lock_owned() else {
            return Ok(LockOutcome::HeldLocally);
        };
        Ok(self.attempt(&key, config, permit).await?.0)
    }

    /// One attempt with the local queue's permit in hand; the permit comes back unless the
    /// lock was acquired (then it stays with the lock's actor until its tenure has settled).
    ///
    /// The attempt runs on the engine thread and hands its answer over a channel: if this
    /// future is dropped, a guard made from a late grant is dropped there, which releases it.
    pub(crate) async fn attempt(
        &self,
        key: &LeaseKey,
        config: LeaseConfig,
        permit: OwnedMutexGuard<()>,
    ) -> Result<Tried> {
        let (tx, rx) = oneshot::channel();
        // Not the service itself: a clone held by this task would keep it alive past the
        // caller's last drop.
        let (ctx, key2) = (self.lock_context(), key.clone());
        let spawned = self.spawn_on_engine(async move {
            let _ = tx.send(attempt_on_engine(ctx, key2, config, permit).await);
        });
        if !spawned {
            return Err(Error::ShutDown);
        }
        rx.await.map_err(|_| Error::ShutDown)?
    }

    pub(crate) fn lock_context(&self) -> LockContext {
        LockContext {
            engine: self.engine().clone(),
            holder: self.holder().clone(),
            limit: self.request_timeout(),
            service_token: self.service_token(),
            clock: Arc::clone(self.registry().clock()),
        }
    }
}

/// What a lock attempt and its guard need of their service, without keeping it alive.
#[derive(Clone)]
pub(crate) struct LockContext {
    pub(crate) engine: actix::Addr<leasehold_engine::LeaseEngine>,
    pub(crate) holder: HolderId,
    pub(crate) limit: Duration,
    service_token: tokio_util::sync::CancellationToken,
    clock: Arc<dyn leasehold_core::Clock>,
}

async fn attempt_on_engine(
    ctx: LockContext,
    key: LeaseKey,
    config: LeaseConfig,
    permit: OwnedMutexGuard<()>,
) -> Result<Tried> {
    {
        let ttl = config.term();
        let msg = TakeLock {
            key: key.clone(),
            config,
            listener: Arc::new(|_, _| {}),
            belief: Some(leasehold_engine::Belief::new(
                ctx.service_token.clone(),
                Arc::clone(&ctx.clock),
            )),
        };
        let sent = ctx.clock.now();
        let (addr, belief, attempt) = match ctx.engine.send(msg).await? {
            Ok(taken) => taken,
            Err(EngineError::Owned {
                owner: Owner::Lock | Owner::Hold,
                ..
            }) => return Ok((LockOutcome::HeldLocally, Some(permit))),
            Err(e) => return Err(e.into()),
        };
        match attempt.await {
            Ok(Attempt::Acquired { token, .. }) => {
                addr.do_send(KeepUntilStopped(Box::new(permit)));
                let guard = LockGuard::new(&ctx, key, token, ttl, sent, addr, belief);
                Ok((LockOutcome::Acquired(guard), None))
            }
            Ok(Attempt::Refused {
                holder,
                token,
                until,
            }) => Ok((
                LockOutcome::HeldBy {
                    holder,
                    token,
                    until,
                },
                Some(permit),
            )),
            Ok(Attempt::Failed(failure)) => {
                Err(Error::Store(leasehold_storage::StoreError::Unexpected {
                    op: "lock",
                    detail: format!("{key}: {failure}"),
                }))
            }
            Err(_) => Err(Error::ShutDown),
        }
    }
}
