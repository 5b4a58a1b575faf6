//! The seeds' methods, on [`LeaseService`] under the names users migrate from (the seeds'
//! `ILeaseService`, PowerJob's `LockService`), each a one-line delegation to a family's handle:
//! the one place where these names live. docs/migrating.md maps them. (`hasLease` is
//! [`LeaseService::has_lease`], a belief read of the session itself.)
//!
//! | seed | here | delegates to |
//! |---|---|---|
//! | `startLeaseTask(name, …)` | [`LeaseService::start_lease_task`] | [`LeaseTasks::start`] |
//! | `stopLeaseTask(name)` | [`LeaseService::stop_lease_task`] | [`LeaseTasks::stop`] |
//! | sharded `startLeaseTask` over a name list | [`LeaseService::start_sharded`] | [`Shards::start`] |
//! | `lock(name, lockName, lockTimeSecond)` | [`LeaseService::lock`] | [`Locks::acquire`] |
//! | `tryLocker(name, lockName, waitTime, lockTimeSecond)` | [`LeaseService::try_locker`] | [`Locks::acquire_within`] |
//! | `unlock(name, lockName)` | [`LeaseService::unlock`] | [`Locks::release`] |
//! | `holdLock(name, lockName, lockTimeSecond)` | [`LeaseService::hold_lock`] | [`Locks::hold`] |
//! | `hasHoldLock(name, lockName)` | [`LeaseService::has_hold_lock`] | [`Locks::is_holding`] |
//! | `queryLockedInstanceByNamePrefix(name, prefix)` | [`LeaseService::query_locked_instance_by_name_prefix`] | [`Locks::held_with_prefix`] |
//! | PowerJob `tryLock(name, maxLockTime)` | [`LeaseService::try_lock`] | [`Locks::acquire`] in [`DEFAULT_LOCK_NAMESPACE`] |
//! | PowerJob `unlock(name)` | [`LeaseService::unlock_default`] | [`Locks::release`] in [`DEFAULT_LOCK_NAMESPACE`] |

use std::time::Duration;

use leasehold_core::{FencingToken, LeaseRecord};

use crate::limits::DEFAULT_LOCK_NAMESPACE;
use crate::shards::{NameSource, ShardOptions};
use crate::{
    LeaseService, LeaseTask, LeaseTaskOptions, LockError, LockGuard, Result, ShardedTasks,
};
#[allow(unused_imports)] // the doc links
use crate::{LeaseTasks, Locks, Shards};

impl LeaseService {
    /// The seeds' `ILeaseService.startLeaseTask`: [`LeaseTasks::start`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// let task = service.start_lease_task("scheduler", LeaseTaskOptions::new()).await?;
    /// task.acquired().await?;
    /// assert!(service.has_lease("scheduler"));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LeaseTasks::start`].
    ///
    /// # Cancel safety
    /// As [`LeaseTasks::start`].
    pub async fn start_lease_task(
        &self,
        name: &str,
        options: LeaseTaskOptions,
    ) -> Result<LeaseTask> {
        self.tasks().start(name, options).await
    }

    /// The seeds' `ILeaseService.stopLeaseTask`: [`LeaseTasks::stop`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// use leasehold::{LeaseService, LeaseTaskOptions};
    /// let service = LeaseService::builder("sqlite::memory:").build().await?;
    /// service.start_lease_task("scheduler", LeaseTaskOptions::new()).await?;
    /// assert!(service.stop_lease_task("scheduler").await?);
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`LeaseTasks::stop`].
    ///
    /// # Cancel safety
    /// As [`LeaseTasks::stop`].
    pub async fn stop_lease_task(&self, name: &str) -> Result<bool> {
        self.tasks().stop(name).await
    }

    /// Sharded lease tasks over `names`: [`Shards::start`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let shards = service.start_sharded(vec!["a"], leasehold::shards::ShardOptions::new()).await?;
    /// assert!(shards.task("a").is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Shards::start`].
    ///
    /// # Cancel safety
    /// As [`Shards::start`].
    pub async fn start_sharded(
        &self,
        names: impl Into<NameSource>,
        options: ShardOptions,
    ) -> Result<ShardedTasks> {
        self.shards().start(names, options).await
    }

    /// The seeds' `ILeaseService.lock(name, lockName, lockTimeSecond)` (default ttl there:
    /// [`crate::limits::DEFAULT_LOCK_TTL`]): [`Locks::acquire`].
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), leasehold::Error> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.lock("jobs", "rebuild-index", leasehold::limits::DEFAULT_LOCK_TTL).await?;
    /// assert!(guard.is_some());
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Locks::attempt`].
    ///
    /// # Cancel safety
    /// As [`Locks::attempt`].
    pub async fn lock(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.locks().acquire(namespace, name, ttl).await
    }

    /// The seeds' `ILeaseService.tryLocker(name, lockName, waitTime, lockTimeSecond)` (`wait`
    /// `None`: forever): [`Locks::acquire_within`].
    ///
    /// # Errors
    /// As [`Locks::acquire_within`].
    ///
    /// # Cancel safety
    /// As [`Locks::acquire_within`].
    pub async fn try_locker(
        &self,
        namespace: &str,
        name: &str,
        wait: Option<Duration>,
        ttl: Duration,
    ) -> Result<Option<LockGuard>> {
        self.locks()
            .acquire_within(namespace, name, wait, ttl)
            .await
    }

    /// The seeds' `ILeaseService.unlock(name, lockName)`: [`Locks::release`].
    ///
    /// # Errors
    /// As [`Locks::release`].
    ///
    /// # Cancel safety
    /// As [`Locks::release`].
    pub async fn unlock(&self, namespace: &str, name: &str) -> Result<(), LockError> {
        self.locks().release(namespace, name).await
    }

    /// The seeds' `ILeaseService.holdLock(name, lockName, lockTimeSecond)`: [`Locks::hold`].
    ///
    /// # Errors
    /// As [`Locks::hold`].
    ///
    /// # Cancel safety
    /// As [`Locks::hold`].
    pub async fn hold_lock(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<Option<FencingToken>> {
        self.locks().hold(namespace, name, ttl).await
    }

    /// The seeds' `ILeaseService.hasHoldLock(name, lockName)`: [`Locks::is_holding`].
    #[must_use]
    pub fn has_hold_lock(&self, namespace: &str, name: &str) -> bool {
        self.locks().is_holding(namespace, name)
    }

    /// The seeds' `ILeaseService.queryLockedInstanceByNamePrefix(name, lockerNamePrefix)`:
    /// [`Locks::held_with_prefix`].
    ///
    /// # Errors
    /// As [`Locks::held_with_prefix`].
    pub async fn query_locked_instance_by_name_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>> {
        self.locks().held_with_prefix(namespace, prefix).await
    }

    /// PowerJob's `LockService.tryLock(name, maxLockTime)`: one attempt at the lock `name` in
    /// the namespace [`DEFAULT_LOCK_NAMESPACE`] for `max_lock_time` ([`Locks::acquire`]).
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
    /// As [`Locks::attempt`].
    pub async fn try_lock(&self, name: &str, max_lock_time: Duration) -> Result<Option<LockGuard>> {
        self.locks()
            .acquire(DEFAULT_LOCK_NAMESPACE, name, max_lock_time)
            .await
    }

    /// PowerJob's `LockService.unlock(name)`: [`Locks::release`] in
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
    /// As [`Locks::release`].
    pub async fn unlock_default(&self, name: &str) -> Result<(), LockError> {
        self.locks().release(DEFAULT_LOCK_NAMESPACE, name).await
    }
}
