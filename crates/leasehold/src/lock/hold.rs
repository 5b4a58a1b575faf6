//! Locks held in the background ([`LeaseService::hold_lock`]), prefix queries and fencing by name.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use leasehold_actor::{BeginFenced, ListLocks, Listener, StartTask, StopTask};
use leasehold_core::{FencingToken, LeaseConfig, LeaseKey, LeaseRecord, Namespace, Notification};
use leasehold_storage::FencedTransaction;
use tokio::sync::watch;

use super::LockError;
use crate::{Error, LeaseService, Result};

impl LeaseService {
    /// Takes the lock `namespace`/`name` (one attempt) and, if it is ours, keeps it: a lease
    /// task with term `ttl` renews it in the background (every ttl/3) until
    /// [`LeaseService::unlock`] or shutdown. Answers the fencing token, or `None` when someone
    /// else holds it. Calling it again while the hold runs answers the current token (or `None`
    /// while it is lost). If a renewal fails past the local deadline the hold is lost
    /// ([`LeaseService::has_hold_lock`] turns false) and the task competes for it again.
    /// Replaces the seeds' `ILeaseService.holdLock(name, lockName, lockTimeSecond)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let token = service.hold_lock("jobs", "compactor", std::time::Duration::from_secs(30)).await?;
    /// assert!(token.is_some() && service.has_hold_lock("jobs", "compactor"));
    /// service.unlock("jobs", "compactor").await?;
    /// assert!(!service.has_hold_lock("jobs", "compactor"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad name or a ttl too short for renewals (under 3 ms);
    /// [`Error::Store`]; [`Error::ShutDown`].
    pub async fn hold_lock(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let key = LeaseKey::parse(namespace, name)?;
        if let Some(current) = self.locks().holds.get(&key) {
            // Already held in the background (or being competed for again after a loss).
            let live = self.registry().has_lease(&key);
            return Ok(live.then(|| FencingToken(current.load(Ordering::SeqCst))));
        }
        let retry = self.locks().retry().min(ttl / 4);
        let config = LeaseConfig::default()
            .with_term(ttl)
            .with_retry_interval(retry);
        config.validate()?;
        // One attempt first: a hold does not wait for another holder.
        let Some(guard) = self.lock(namespace, name, ttl).await? else {
            return Ok(None);
        };
        let (tx, mut rx) = watch::channel(None::<FencingToken>);
        let current = Arc::new(AtomicI64::new(0));
        let seen = Arc::clone(&current);
        let listener: Listener = Arc::new(move |_: &LeaseKey, n: &Notification| {
            if let Notification::Acquired { token, .. } = n {
                seen.store(token.get(), Ordering::SeqCst);
                tx.send_replace(Some(*token));
            }
        });
        self.locks().holds.insert(key.clone(), current);
        let started = self
            .engine()
            .send(StartTask {
                key: key.clone(),
                config,
                listener,
            })
            .await;
        if !matches!(started, Ok(Ok(_))) {
            self.locks().holds.remove(&key);
        }
        started??;
        // The task's grant takes our one-shot grant over as a new tenure of the same holder;
        // the guard is then forgotten (its release would find the old token: harmless, but
        // pointless), so it is marked released without a message.
        guard.held.take();
        self.locks().forget(&guard.held);
        let permit = guard
            .held
            .permit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        drop(guard);
        let token = tokio::time::timeout(ttl, rx.wait_for(Option::is_some)).await;
        drop(permit);
        match token {
            Ok(Ok(t)) => Ok(*t),
            _ => {
                self.locks().holds.remove(&key);
                self.engine().send(StopTask { key }).await?;
                Ok(None)
            }
        }
    }

    /// Whether this service holds `namespace`/`name` through [`LeaseService::hold_lock`] now:
    /// memory only, false at the local deadline when renewals fail. Replaces the seeds'
    /// `ILeaseService.hasHoldLock(name, lockName)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// assert!(!service.has_hold_lock("jobs", "compactor"));
    /// service.hold_lock("jobs", "compactor", std::time::Duration::from_secs(30)).await?;
    /// assert!(service.has_hold_lock("jobs", "compactor"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    #[must_use]
    pub fn has_hold_lock(&self, namespace: &str, name: &str) -> bool {
        self.registry().has_lease_str(namespace, name)
    }

    pub(crate) async fn stop_hold(&self, key: LeaseKey, token: i64) -> Result<(), LockError> {
        let live = self.registry().has_lease(&key);
        self.engine()
            .send(StopTask { key: key.clone() })
            .await
            .map_err(Error::from)?;
        if live {
            Ok(())
        } else {
            Err(LockError::LockLost {
                token: FencingToken(token),
                key,
            })
        }
    }

    /// The locks held now in `namespace` whose names start with `prefix` (`%`, `_` and quotes
    /// match only themselves), with holder, fencing token and, by
    /// [`LeaseRecord::time_left`], the time left by the database's clock. Replaces the seeds'
    /// `ILeaseService.queryLockedInstanceByNamePrefix(name, lockerNamePrefix)`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let _a = service.lock("jobs", "shard-1", Duration::from_secs(30)).await?;
    /// let _b = service.lock("jobs", "shard_2", Duration::from_secs(30)).await?;
    /// let held = service.query_locked_instance_by_name_prefix("jobs", "shard-").await?;
    /// assert_eq!(held.len(), 1);
    /// assert_eq!(&held[0].holder, service.holder());
    /// assert!(held[0].time_left() > Duration::from_secs(20));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace; [`Error::Store`]; [`Error::ShutDown`].
    pub async fn query_locked_instance_by_name_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>> {
        let namespace = Namespace::new(namespace)?;
        let msg = ListLocks {
            namespace,
            prefix: prefix.to_owned(),
        };
        Ok(self.engine().send(msg).await??)
    }

    /// Opens a fenced transaction for the tenure `token` of `namespace`/`name` held by this
    /// service, on the service's own connection: see [`crate::LockGuard::begin_fenced`] (and its
    /// limits). `None` when that tenure has ended.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("ns", "ledger", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let txn = service.begin_fenced("ns", "ledger", guard.token()).await?;
    /// assert!(txn.is_some());
    /// # drop(txn); service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`]; [`Error::Store`] when the database fails or the store is not a
    /// [`crate::SeaOrmStore`]; [`Error::ShutDown`].
    pub async fn begin_fenced(
        &self,
        namespace: &str,
        name: &str,
        token: FencingToken,
    ) -> Result<Option<FencedTransaction>> {
        let key = LeaseKey::parse(namespace, name)?;
        Ok(self.engine().send(BeginFenced { key, token }).await??)
    }
}
