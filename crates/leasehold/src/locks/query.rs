//! Reading locks: the held locks by name prefix ([`Locks::held_with_prefix`]) and a fenced
//! transaction for a tenure named by key and token ([`Locks::begin_fenced`]).

use leasehold_core::{FencingToken, LeaseKey, LeaseRecord, Namespace};
use leasehold_engine::{BeginFenced, ListLocks};
use leasehold_storage::FencedTransaction;

use super::Locks;
#[allow(unused_imports)] // the doc links
use crate::Error;
use crate::Result;

impl Locks<'_> {
    /// The locks held now in `namespace` whose names start with `prefix` (`%`, `_` and quotes
    /// match only themselves), with holder, fencing token and, by
    /// [`LeaseRecord::time_left`], the time left by the database's clock. The seeds'
    /// `queryLockedInstanceByNamePrefix`.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let locks = service.locks();
    /// let _a = locks.acquire("jobs", "shard-1", Duration::from_secs(30)).await?;
    /// let _b = locks.acquire("jobs", "shard_2", Duration::from_secs(30)).await?;
    /// let held = locks.held_with_prefix("jobs", "shard-").await?;
    /// assert_eq!(held.len(), 1);
    /// assert_eq!(&held[0].holder, service.holder());
    /// assert!(held[0].time_left() > Duration::from_secs(20));
    /// # service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad namespace; [`Error::Store`]; [`Error::ShutDown`].
    pub async fn held_with_prefix(
        &self,
        namespace: &str,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>> {
        let namespace = Namespace::new(namespace)?;
        let msg = ListLocks {
            namespace,
            prefix: prefix.to_owned(),
        };
        Ok(self.service.engine().send(msg).await??)
    }

    /// Opens a fenced transaction for the tenure `token` of `namespace`/`name` held by this
    /// service, on the service's own connection: see [`crate::LockGuard::begin_fenced`] (and its
    /// limits). `None` when that tenure has ended.
    ///
    /// # Examples
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let service = leasehold::LeaseService::builder("sqlite::memory:").build().await?;
    /// let guard = service.locks().acquire("ns", "ledger", std::time::Duration::from_secs(10)).await?.expect("free");
    /// let txn = service.locks().begin_fenced("ns", "ledger", guard.token()).await?;
    /// assert!(txn.is_some());
    /// # drop(txn); service.shutdown().await?; Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Invalid`]; [`Error::Store`] when the database fails or the service has no SQL
    /// store ([`crate::LeaseServiceBuilder::from_sql_store`]); [`Error::ShutDown`].
    pub async fn begin_fenced(
        &self,
        namespace: &str,
        name: &str,
        token: FencingToken,
    ) -> Result<Option<FencedTransaction>> {
        let key = LeaseKey::parse(namespace, name)?;
        Ok(self
            .service
            .engine()
            .send(BeginFenced { key, token })
            .await??)
    }
}
