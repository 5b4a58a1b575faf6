//! Waiting for a lock: [`LeaseService::try_locker`], PowerJob's `tryLock`, and unlocking by name.

use std::time::Duration;

use leasehold_core::LeaseKey;
use leasehold_engine::WatchReleases;
use rand::Rng;
use tokio::sync::mpsc;

use leasehold_engine::FindLock;

use super::{DEFAULT_LOCK_NAMESPACE, LockError, LockGuard, LockOutcome, guard, lock_config};
use crate::{LeaseService, Result};

impl LeaseService {
    /// Takes the lock `namespace`/`name` for `ttl`, waiting up to `wait` (`None`: forever) while
    /// it is held; `None` if the wait ran out. Between attempts it waits the retry interval
    /// ([`LeaseService::set_lock_retry_interval`], default 100 ms) doubling up to 8× with
    /// ±25 % jitter; a release by any process ends the wait at once through the service's doorbell
    /// (`NOTIFY` on PostgreSQL, named locks on MySQL/MariaDB, a datagram on a SQLite file).
    /// Tasks of this service queue locally: only the first talks to the database, and a local
    /// release hands over at once. Replaces the seeds' `ILeaseService.tryLocker(name, lockName,
    /// waitTime, lockTimeSecond)` and Spring's `JdbcLockRegistry` `Lock.tryLock(time, unit)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let first = service.try_locker("jobs", "x", None, Duration::from_secs(30)).await?.expect("free");
    /// let waited = service.try_locker("jobs", "x", Some(Duration::from_millis(200)), Duration::from_secs(30)).await?;
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
    pub async fn try_locker(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        let key = LeaseKey::parse(namespace, name)?;
        let config = lock_config(ttl, self.request_timeout())?;
        let clock = std::sync::Arc::clone(self.registry().clock());
        let give_up = wait.map(|w| clock.now() + w);
        let queue = self.locks().queue(&key);
        let mut permit = match give_up {
            Some(at) => match tokio::time::timeout_at(at, queue.lock_owned()).await {
                Ok(p) => p,
                Err(_) => return Ok(None),
            },
            None => queue.lock_owned().await,
        };
        let retry = self.locks().retry();
        let mut backoff = retry;
        let mut releases = None;
        let mut watched = false;
        loop {
            // The permit comes back only when the attempt did not acquire. The attempt itself
            // is bounded by the request timeout, and by `wait`: dropped at the end of the wait,
            // a late grant is released.
            let attempt = self.attempt(&key, config.clone(), permit);
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
                releases = self.watch_releases(&key).await?;
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

    /// Wake-ups when any process releases `key`, from the service's doorbell
    /// (`leasehold_storage::doorbell`); `None` without one (waiters poll).
    async fn watch_releases(&self, key: &LeaseKey) -> Result<Option<mpsc::Receiver<()>>> {
        Ok(self
            .engine()
            .send(WatchReleases { key: key.clone() })
            .await?)
    }

    /// PowerJob's `LockService.tryLock(name, maxLockTime)`: one attempt at the lock `name` in
    /// the namespace [`DEFAULT_LOCK_NAMESPACE`] for `max_lock_time`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.try_lock("dispatch", std::time::Duration::from_secs(60)).await?;
    /// assert!(guard.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LeaseService::lock`].
    pub async fn try_lock(&self, name: &str, max_lock_time: Duration) -> Result<Option<LockGuard>> {
        self.lock(DEFAULT_LOCK_NAMESPACE, name, max_lock_time).await
    }

    /// PowerJob's `LockService.unlock(name)`: [`LeaseService::unlock`] in
    /// [`DEFAULT_LOCK_NAMESPACE`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.try_lock("dispatch", std::time::Duration::from_secs(60)).await?;
    /// service.unlock_default("dispatch").await?;
    /// drop(guard); // already released: dropping does nothing more
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LeaseService::unlock`].
    pub async fn unlock_default(&self, name: &str) -> Result<(), LockError> {
        self.unlock(DEFAULT_LOCK_NAMESPACE, name).await
    }

    /// Releases the lock `namespace`/`name` held by this service (taken with
    /// [`LeaseService::lock`], [`LeaseService::try_locker`] or [`LeaseService::hold_lock`]); its
    /// guard, if still around, then does nothing on drop. Replaces the seeds'
    /// `ILeaseService.unlock(name, lockName)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leasehold::LockError;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let _guard = service.lock("jobs", "x", std::time::Duration::from_secs(30)).await?;
    /// service.unlock("jobs", "x").await?;
    /// assert!(matches!(service.unlock("jobs", "x").await, Err(LockError::NotHeld { .. })));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`LockError::NotHeld`] when this service does not hold it (nothing is changed);
    /// [`LockError::LockLost`] when the tenure had already ended (expired or taken over);
    /// [`LockError::Service`] for a bad name or a database failure.
    ///
    /// # Cancel safety
    /// The tenure ends and the release is sent before the first await of the release; dropped
    /// before that (while the lock is being looked up), nothing is changed.
    pub async fn unlock(&self, namespace: &str, name: &str) -> Result<(), LockError> {
        let key = LeaseKey::parse(namespace, name).map_err(crate::Error::from)?;
        let found = self
            .engine()
            .send(FindLock { key: key.clone() })
            .await
            .map_err(crate::Error::from)?;
        let Some((actor, belief, _)) = found else {
            return Err(LockError::NotHeld { key });
        };
        let Some(token) = belief.token() else {
            // Its tenure already ended: say so, and let the actor settle what is left.
            let token = belief
                .tenure()
                .map_or(leasehold_core::FencingToken(0), |(t, _)| t);
            actor.do_send(leasehold_engine::UnlockLock {
                token,
                not_before: None,
                reply: None,
            });
            return Err(LockError::LockLost { key, token });
        };
        guard::release(self.request_timeout(), &actor, &belief, &key, token, None).await
    }
}
