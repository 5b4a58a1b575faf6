//! Named locks with a ttl on the lease engine: the seeds' `lock`, `tryLocker`, `unlock`,
//! `holdLock`, `hasHoldLock`, `queryLockedInstanceByNamePrefix`, PowerJob's `tryLock`/`unlock`,
//! ShedLock's `lockAtLeastFor` and Spring's `JdbcLockRegistry`.
//!
//! # How a lock is taken
//! 1. Tasks of one service waiting for one lock queue on a local fair mutex, so only one of them
//!    talks to the database at a time; a local release hands over as soon as the release
//!    statement is done, without waiting for a poll.
//! 2. The task at the head asks the engine for a grant (a new tenure: a new fencing token). The
//!    request runs in a task of its own; if the caller's future is dropped before the answer
//!    arrives, a grant that arrives anyway is released at once.
//! 3. While the lock is held by another holder, the task waits the retry interval (default
//!    100 ms, Spring's `idleBetweenTries`), doubling up to 8× with ±25 % jitter, or less when a
//!    PostgreSQL `NOTIFY` announces a release first.
//!
//! # Limits
//! - The acquiring calls need a tokio runtime (plain tokio or actix): the grant request and the
//!   guard's deadline timer run as tokio tasks.
//! - On PostgreSQL each lock being waited for holds one pooled connection for `LISTEN` (one per
//!   service and lock, not per task: local waiters queue). The listener starts after the first
//!   refused attempt; a release in that gap is found by the next poll. Releases by
//!   [`LeaseService::unlock`] of a [`LeaseService::hold_lock`] and tenures that merely lapse are
//!   not announced: waiters find them by polling.
//! - A lock's local deadline is `send time + ttl − min(ttl/10, 2 s)`; renew with
//!   [`LockGuard::renew`] (or use [`LeaseService::hold_lock`]) for work longer than that.
//! - Locks and lease tasks of one service on the same key exclude each other locally
//!   ([`LockOutcome::HeldLocally`]).

mod guard;
mod hold;
mod wait;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use actix::{Handler, Message};
use dashmap::DashMap;
use leasehold_actor::{AcquireLock, LeaseEngine};
use leasehold_core::{AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, Term};
use tokio::sync::{OwnedMutexGuard, oneshot};
use tokio::time::Instant;

pub use guard::LockGuard;
use guard::{HeldLock, spawn_deadline_timer};

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

/// Per-service lock state: local queues, held locks, held-in-background locks.
#[derive(Debug)]
pub(crate) struct LocalLocks {
    queues: DashMap<LeaseKey, Weak<tokio::sync::Mutex<()>>>,
    held: DashMap<LeaseKey, Arc<HeldLock>>,
    /// Locks held by a lease task, with the token of the current tenure.
    holds: DashMap<LeaseKey, Arc<std::sync::atomic::AtomicI64>>,
    retry_millis: AtomicU64,
}

impl Default for LocalLocks {
    fn default() -> Self {
        Self {
            queues: DashMap::new(),
            held: DashMap::new(),
            holds: DashMap::new(),
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

    pub(crate) fn forget(&self, held: &Arc<HeldLock>) {
        self.held.remove_if(&held.key, |_, h| Arc::ptr_eq(h, held));
    }

    fn retry(&self) -> Duration {
        Duration::from_millis(self.retry_millis.load(Ordering::Relaxed))
    }
}

/// How long a lock of `ttl` is believed locally after its request was sent.
pub(crate) fn local_term(ttl: Term) -> Duration {
    let ttl = ttl.duration();
    ttl - (ttl / 10).clamp(Duration::from_millis(1), Duration::from_secs(2))
}

/// Sends `msg` from a task of its own and waits for the answer: the engine's answer is received
/// even if the caller stops waiting.
async fn detached<M>(service: &LeaseService, msg: M) -> Result<M::Result>
where
    M: Message + Send + 'static,
    M::Result: Send,
    LeaseEngine: Handler<M>,
{
    let engine = service.engine().clone();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let _ = tx.send(engine.send(msg).await);
    });
    Ok(rx.await.map_err(|_| Error::ShutDown)??)
}

fn ttl_term(ttl: Duration) -> Result<Term> {
    Ok(Term::new("ttl", ttl)?)
}

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
    /// [`Error::Invalid`] for a bad namespace, name or ttl; [`Error::Store`]; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: a grant that arrives after the future was dropped is released.
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
        let ttl = ttl_term(ttl)?;
        let Ok(permit) = self.locks().queue(&key).try_lock_owned() else {
            return Ok(LockOutcome::HeldLocally);
        };
        Ok(self.attempt(&key, ttl, permit).await?.0)
    }

    /// One attempt with the local queue's permit in hand; the permit comes back unless the
    /// lock was acquired (then the guard keeps it) or the answer was lost.
    async fn attempt(
        &self,
        key: &LeaseKey,
        ttl: Term,
        permit: OwnedMutexGuard<()>,
    ) -> Result<(LockOutcome, Option<OwnedMutexGuard<()>>)> {
        if self.registry().has_lease(key) || self.locks().held.contains_key(key) {
            return Ok((LockOutcome::HeldLocally, Some(permit)));
        }
        let engine = self.engine().clone();
        let (tx, rx) = oneshot::channel();
        let msg = AcquireLock {
            key: key.clone(),
            ttl,
        };
        let sent = self.registry().clock().now();
        let task_key = key.clone();
        tokio::spawn(async move {
            let answer = engine.send(msg).await;
            if let Err((Ok(Ok(AcquireOutcome::Acquired { token, .. })), permit)) =
                tx.send((answer, permit))
            {
                // The caller is gone: give the grant back at once.
                engine.do_send(leasehold_actor::ReleaseLock {
                    key: task_key,
                    token,
                    keep_for: None,
                    hold: Some(Box::new(permit)),
                });
            }
        });
        let (answer, permit) = rx.await.map_err(|_| Error::ShutDown)?;
        match answer?? {
            AcquireOutcome::Acquired { token, .. } => Ok((
                LockOutcome::Acquired(self.guard(key.clone(), token, ttl, sent, permit)),
                None,
            )),
            AcquireOutcome::HeldBy {
                holder,
                until,
                token,
            } => Ok((
                LockOutcome::HeldBy {
                    holder,
                    token,
                    until,
                },
                Some(permit),
            )),
        }
    }

    fn guard(
        &self,
        key: LeaseKey,
        token: FencingToken,
        ttl: Term,
        sent: Instant,
        permit: OwnedMutexGuard<()>,
    ) -> LockGuard {
        let held = Arc::new(HeldLock {
            key: key.clone(),
            token,
            ttl,
            sent,
            deadline: Mutex::new(sent + local_term(ttl)),
            at_least: Mutex::new(None),
            cancel: tokio_util::sync::CancellationToken::new(),
            permit: Mutex::new(Some(permit)),
            released: std::sync::atomic::AtomicBool::new(false),
        });
        spawn_deadline_timer(&held);
        self.locks().held.insert(key, Arc::clone(&held));
        LockGuard {
            service: self.clone(),
            held,
        }
    }
}
