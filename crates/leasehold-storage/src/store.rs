//! The `LeaseStore` trait.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseRecord, Namespace,
    ReleaseOutcome, RenewOutcome, Term,
};

use crate::StoreError;

/// One lease of a batched renewal: the key and the token of the tenure being renewed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RenewItem {
    /// The lease.
    pub key: LeaseKey,
    /// The tenure's fencing token.
    pub token: FencingToken,
}

/// Where lease rows live. Every method is one atomic step against the store's clock.
///
/// Answers that depend on other holders are outcomes; `Err` means the store is unreachable or
/// wrong, and the caller cannot know whether a write took effect (an unknown outcome).
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Grants `key` to `holder` for `term` if the row is free, released, expired, or already held
    /// by `holder` (then the token is kept and the grant extended). A grant to a new tenure
    /// increases the token by exactly one.
    async fn try_acquire(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
    ) -> Result<AcquireOutcome, StoreError>;

    /// Like [`LeaseStore::try_acquire`], but always begins a **new tenure**: a live grant already
    /// held by `holder` is taken over with the token increased by one, like any free row.
    ///
    /// The lease engine grants only this way. A holder that gave a tenure up locally (lost it at
    /// its local deadline, or stopped waiting for a release's answer) may still have requests of
    /// that tenure in flight; with a new token for every tenure, such a late renew or release can
    /// never touch the next one.
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        term: Term,
    ) -> Result<AcquireOutcome, StoreError>;

    /// Extends the tenure identified by `holder` and `token` to one `term` from now, if the grant
    /// has not ended. A lapsed tenure is lost even if nobody took the lease.
    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError>;

    /// Renews many tenures of one holder in as few statements as the backend allows (one per
    /// few thousand items). The answer is aligned with `items`: `true` where renewed.
    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        term: Term,
    ) -> Result<Vec<bool>, StoreError>;

    /// Releases the live tenure `holder`/`token`: status 0, end time now. The row stays so the
    /// token keeps growing.
    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError>;

    /// Releases every live lease of `holder`, in one statement. Returns how many.
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError>;

    /// Releases exactly the tenures `items` of `holder` (each by key and token), in as few
    /// statements as the backend allows. Returns how many were live and released. A tenure
    /// that already ended, or a row taken over since, is left as it is.
    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<u64, StoreError> {
        let mut released = 0;
        for item in items {
            if self.release(&item.key, holder, item.token).await? == ReleaseOutcome::Released {
                released += 1;
            }
        }
        Ok(released)
    }

    /// Operator override: releases `key` whoever holds it. Returns whether it was held.
    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError>;

    /// Reads one row, with the database's current time.
    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError>;

    /// The held leases (in `namespace`, or in every namespace when `None`) whose names start with
    /// `prefix`, ordered by namespace and name. Wildcards in `prefix` match only themselves.
    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError>;

    /// Deletes rows (in `namespace`, or in every namespace when `None`) released or expired for
    /// longer than `older_than`. Returns how many.
    ///
    /// A purged name starts again at token 1: purge only with an age far beyond any pause a
    /// stale holder could come back from.
    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError>;

    /// The store's clock.
    async fn db_now(&self) -> Result<DbInstant, StoreError>;

    /// This store as a [`SeaOrmStore`](crate::SeaOrmStore), when it is one (default `None`).
    /// Lets the engine reach the connection for fencing and PostgreSQL `NOTIFY`; a wrapping store
    /// that does not forward it simply goes without them.
    fn sea_orm(&self) -> Option<&crate::SeaOrmStore> {
        None
    }
}
