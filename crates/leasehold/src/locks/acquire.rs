//! Taking a lock: one attempt ([`Locks::attempt`], [`Locks::acquire`]) and waiting for it
//! ([`Locks::acquire_within`]), with the attempt that runs on the engine thread.

use std::sync::Arc;
use std::time::Duration;

use leasehold_core::{HolderId, LeaseConfig, LeaseKey};
use leasehold_engine::{
    Attempt, EngineError, KeepUntilStopped, Owner, SettleLock, TakeLock, WatchReleases,
};
use rand::RngExt;
use tokio::sync::{OwnedMutexGuard, mpsc, oneshot};

use super::{LockGuard, LockOutcome, Locks, lock_config};
use crate::{Error, LeaseService, Result};

/// What one attempt came to, with the local queue's permit when it was not used up.
pub(crate) type Tried = (LockOutcome, Option<OwnedMutexGuard<()>>);

impl Locks<'_> {
    /// Sets the first wait between attempts of [`Locks::acquire_within`] (default 100 ms).
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// service.locks().set_retry_interval(std::time::Duration::from_millis(20));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    pub fn set_retry_interval(&self, interval: Duration) {
        self.service.locks().queues().set_retry(interval);
    }

    /// One attempt to take the lock `namespace`/`name` for `ttl`, returning at once with what it
    /// came to: acquired, held by another holder (who, their token, until when), or held by
    /// another task of this service.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use leasehold::{LeaseService, LockOutcome};
    /// use leasehold::store::MemoryStore;
    /// let store = Arc::new(MemoryStore::new());
    /// let a = leasehold::LeaseServiceBuilder::from_store(store.clone()).build().await?;
    /// let b = leasehold::LeaseServiceBuilder::from_store(store).build().await?;
    /// let _guard = a.lock("jobs", "x", Duration::from_secs(30)).await?;
    /// match b.locks().attempt("jobs", "x", Duration::from_secs(30)).await? {
    ///     LockOutcome::HeldBy { holder, .. } => assert_eq!(&holder, a.holder()),
    ///     other => panic!("{other:?}"),
    /// }
    /// # a.shutdown().await?; b.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace, name or ttl (zero, or over [`leasehold_core::Term::MAX`]:
    /// a plain lock is never renewed by itself, so any ttl from 1 ms is accepted);
    /// [`Error::KeyInUse`] when a lease task, a hold or sharded names of this service use the
    /// key; [`Error::Store`] when the attempt failed or got no answer within the request
    /// timeout, or was granted only after its own local deadline (a ttl shorter than the round
    /// trip): a grant it may have made is released; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: the attempt runs on the engine thread; if the future is dropped, a grant
    /// that arrives anyway (even one whose answer was already waiting) is released at once, and
    /// the local queue's place is given back. Returns within the request timeout.
    pub async fn attempt(&self, namespace: &str, name: &str, ttl: Duration) -> Result<LockOutcome> {
        let key = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.service.request_timeout())?;
        self.attempt_key(&key, config).await
    }

    /// [`Locks::attempt`] for a parsed key and a checked configuration ([`lock_config`] or
    /// [`super::hold_config`]).
    pub(crate) async fn attempt_key(
        &self,
        key: &LeaseKey,
        config: LeaseConfig,
    ) -> Result<LockOutcome> {
        let Ok(permit) = self.service.locks().queues().queue(key).try_lock_owned() else {
            self.service.settle_lock(key);
            return Ok(LockOutcome::HeldLocally);
        };
        Ok(self.service.attempt(key, config, permit).await?.0)
    }

    /// One attempt to take the lock `namespace`/`name` for `ttl`, returning at once; `None` when
    /// someone else holds it (see [`Locks::attempt`] for who). The seeds' `lock`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let guard = locks.acquire("jobs", "rebuild-index", leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(guard.is_some());
    /// // held (by this service's other task, here): one attempt, no wait
    /// assert!(locks.acquire("jobs", "rebuild-index", Duration::from_secs(5)).await?.is_none());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locks::attempt`].
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`].
    pub async fn acquire(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        Ok(self.attempt(namespace, name, ttl).await?.into_guard())
    }

    /// Takes the lock `namespace`/`name` for `ttl`, waiting up to `wait` (`None`: forever) while
    /// it is held; `None` if the wait ran out. Between attempts it waits the retry interval
    /// ([`Locks::set_retry_interval`], default 100 ms) doubling up to 8× with
    /// ±25 % jitter; a release by any process ends the wait at once through the service's doorbell
    /// (`NOTIFY` on PostgreSQL, named locks on MySQL/MariaDB, a datagram on a SQLite file).
    /// Tasks of this service queue locally: only the first talks to the database, and a local
    /// release hands over at once. The seeds' `tryLocker` and Spring's `JdbcLockRegistry`
    /// `Lock.tryLock(time, unit)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let first = service.locks().acquire_within("jobs", "x", None, Duration::from_secs(30)).await?.expect("free");
    /// let waited = service.locks().acquire_within("jobs", "x", Some(Duration::from_millis(200)), Duration::from_secs(30)).await?;
    /// assert!(waited.is_none());
    /// first.unlock().await.expect("held");
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`crate::Error::Invalid`] for a bad namespace, name or ttl; [`crate::Error::Store`] when
    /// the database fails; [`crate::Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped future leaves no waiter behind, and a grant whose answer arrives
    /// after the drop is released at once. Returns within `wait` (plus scheduling), even while
    /// the database is slow to answer.
    pub async fn acquire_within(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let key = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.service.request_timeout())?;
        self.wait_for_key(&key, wait, config).await
    }

    /// [`Locks::acquire_within`] for a parsed key (a user's, or a derived one) and a checked
    /// configuration.
    pub(super) async fn wait_for_key(
        &self,
        key: &LeaseKey,
        wait: Option<Duration>,
        config: LeaseConfig,
    ) -> Result<Option<LockGuard>> {
        let key = key.clone();
        let service = self.service;
        let clock = Arc::clone(service.registry().clock());
        let give_up = wait.map(|w| clock.now() + w);
        let queue = service.locks().queues().queue(&key);
        if let Ok(free) = Arc::clone(&queue).try_lock_owned() {
            drop(free);
        } else {
            service.settle_lock(&key);
        }
        let mut permit = match give_up {
            Some(at) => match tokio::time::timeout_at(at, queue.lock_owned()).await {
                Ok(p) => p,
                Err(_) => return Ok(None),
            },
            None => queue.lock_owned().await,
        };
        let retry = service.locks().queues().retry();
        let mut backoff = retry;
        let mut releases = None;
        let mut watched = false;
        loop {
            // The permit comes back only when the attempt did not acquire. The attempt itself
            // is bounded by the request timeout, and by `wait`: dropped at the end of the wait,
            // a late grant is released.
            let attempt = service.attempt(&key, config.clone(), permit);
            let tried = match give_up {
                Some(at) => match tokio::time::timeout_at(at, attempt).await {
                    Ok(tried) => tried?,
                    Err(_) => return Ok(None),
                },
                None => attempt.await?,
            };
            match tried {
                (LockOutcome::Acquired(guard), _) => return Ok(Some(guard)),
                (_, Some(p)) => permit = p,
                (_, None) => return Ok(None),
            }
            let now = clock.now();
            if give_up.is_some_and(|at| now >= at) {
                return Ok(None);
            }
            if !watched {
                // Watch first, then try again at once: a release after this attempt rings.
                watched = true;
                releases = service.watch_releases(&key).await?;
                if releases.is_some() {
                    continue;
                }
            }
            let jitter = rand::rng().random_range(0.75..1.25);
            let mut pause = backoff.mul_f64(jitter);
            if let Some(at) = give_up {
                pause = pause.min(at.saturating_duration_since(now));
            }
            backoff = (backoff * 2).min(retry * 8);
            let sleep = tokio::time::sleep(pause);
            match releases.as_mut() {
                Some(rx) => {
                    tokio::select! {
                        () = sleep => {}
                        woke = rx.recv() => if woke.is_none() { releases = None },
                    }
                }
                None => sleep.await,
            }
        }
    }
}

impl LeaseService {
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

    /// Someone waits for `key`, found busy locally: a failed release of its last tenure is
    /// sent again now rather than at its backoff ([`SettleLock`]).
    pub(crate) fn settle_lock(&self, key: &LeaseKey) {
        self.engine().do_send(SettleLock { key: key.clone() });
    }

    /// Wake-ups when any process releases `key`, from the service's doorbell
    /// (`leasehold_storage::doorbell`); `None` without one (waiters poll).
    pub(crate) async fn watch_releases(
        &self,
        key: &LeaseKey,
    ) -> Result<Option<mpsc::Receiver<()>>> {
        Ok(self
            .engine()
            .send(WatchReleases { key: key.clone() })
            .await?)
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
            dispatch: leasehold_engine::caller_dispatch(),
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

impl LockContext {
    /// A belief for a new lock actor of the service.
    pub(crate) fn new_belief(&self) -> Arc<leasehold_engine::Belief> {
        leasehold_engine::Belief::new(self.service_token.clone(), Arc::clone(&self.clock))
    }

    /// The service's monotonic clock.
    pub(crate) fn clock(&self) -> &Arc<dyn leasehold_core::Clock> {
        &self.clock
    }

    /// The parent of every tenure's cancellation token.
    pub(crate) fn service_token(&self) -> &tokio_util::sync::CancellationToken {
        &self.service_token
    }
}
