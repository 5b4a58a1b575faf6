//! Locks held in the background ([`LeaseService::hold_lock`]), prefix queries and fencing by name.

use std::time::Duration;

use leasehold_core::{FencingToken, LeaseKey, LeaseRecord, Namespace};
use leasehold_engine::{BeginFenced, FindLock, ListLocks, MakeHold, Owner};
use leasehold_storage::FencedTransaction;

use super::{LockOutcome, lock_config};
use crate::{Error, LeaseService, Result};

impl LeaseService {
    /// Takes the lock `namespace`/`name` (one attempt) and, if it is ours, keeps it: the same
    /// lock's lease actor switches to automatic renewal (every ttl/3) until
    /// [`LeaseService::unlock`] or shutdown. Answers the fencing token, or `None` when someone
    /// else holds it. Calling it again while the hold runs answers the current token (or `None`
    /// while it is lost). If a renewal fails past the local deadline the hold is lost
    /// ([`LeaseService::has_hold_lock`] turns false) and it competes for the lock again.
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
    /// [`Error::Invalid`] for a bad name or a ttl too short for renewals; [`Error::KeyInUse`]
    /// when a lease task, a lock or sharded names of this service use the key (a lease task is
    /// never stopped by it); [`Error::Store`]; [`Error::ShutDown`].
    ///
    /// # Cancel safety
    /// Dropped before the grant, nothing is kept (a late grant is released); dropped after, the
    /// lock is either released or held (then [`LeaseService::has_hold_lock`] says so and
    /// [`LeaseService::unlock`] releases it).
    pub async fn hold_lock(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        let key = LeaseKey::parse(namespace, name)?;
        match self.engine().send(FindLock { key: key.clone() }).await? {
            Some((_, belief, Owner::Hold)) => return Ok(belief.token()),
            Some((_, _, owner)) => return Err(Error::KeyInUse { key, owner }),
            None => {}
        }
        let config = lock_config(ttl, self.request_timeout())?;
        let Ok(permit) = self.locks().queue(&key).try_lock_owned() else {
            return Err(Error::KeyInUse {
                key,
                owner: Owner::Lock,
            });
        };
        let guard = match self.attempt(&key, config, permit).await?.0 {
            LockOutcome::Acquired(guard) => guard,
            LockOutcome::HeldBy { .. } => return Ok(None),
            LockOutcome::HeldLocally => {
                return Err(Error::KeyInUse {
                    key,
                    owner: Owner::Lock,
                });
            }
        };
        // The same actor renews it from now on: nothing to release when the guard goes.
        if !self.engine().send(MakeHold { key }).await? {
            // Its tenure ended in between: the guard releases what is left.
            return Ok(None);
        }
        guard.disarm();
        Ok(Some(guard.token()))
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
    /// [`Error::Invalid`]; [`Error::Store`] when the database fails or the service has no SQL
    /// store ([`crate::LeaseService::from_sql_store`]); [`Error::ShutDown`].
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
