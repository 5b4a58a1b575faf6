//! The defect of the MySQL group-commit grant, put back as a decorator so that the check can
//! show it catches it on any backend: a batched grant answers a live row of the caller's own
//! holder id `Acquired` with that row's token and end (the row's holder id alone decides the
//! item), where `begin_tenure` answers `HeldBy`.

use std::time::Duration;

use async_trait::async_trait;
use leasehold_storage::{
    AcquireOutcome, AllOutcome, BatchRenewal, DbInstant, FencingToken, Grant, HolderId, LeaseKey,
    LeaseRecord, LeaseStore, LeaseValue, Namespace, ReleaseOutcome, RenewItem, RenewOutcome,
    SeaOrmStore, SetValueOutcome, StoreError, Term,
};

/// A store whose `begin_tenure_many` believes the holder id (everything else delegates).
pub struct BelievesHolderId(pub SeaOrmStore);

#[async_trait]
impl LeaseStore for BelievesHolderId {
    async fn begin_tenure(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        grant: Grant,
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<AcquireOutcome, StoreError> {
        self.0.begin_tenure(key, holder, grant, term, value).await
    }
    async fn begin_tenure_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
        let answers = self.0.begin_tenure_many(holder, keys, term, value).await?;
        Ok(answers
            .into_iter()
            .map(|a| match a {
                Ok(AcquireOutcome::HeldBy {
                    holder: h,
                    until,
                    token,
                }) if &h == holder => Ok(AcquireOutcome::Acquired { token, until }),
                other => other,
            })
            .collect())
    }
    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        self.0.begin_tenure_all(holder, keys, term).await
    }
    async fn set_value(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        value: Option<&LeaseValue>,
    ) -> Result<SetValueOutcome, StoreError> {
        self.0.set_value(key, holder, token, value).await
    }
    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        self.0.renew(key, holder, token, term).await
    }
    async fn renew_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        term: Term,
    ) -> Result<Vec<bool>, StoreError> {
        self.0.renew_many(holder, items, term).await
    }
    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        self.0.renew_batch(holder, items, term).await
    }
    async fn release(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
    ) -> Result<ReleaseOutcome, StoreError> {
        self.0.release(key, holder, token).await
    }
    async fn release_many(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<u64, StoreError> {
        self.0.release_many(holder, items).await
    }
    async fn release_batch(
        &self,
        holder: &HolderId,
        items: &[RenewItem],
    ) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
        self.0.release_batch(holder, items).await
    }
    async fn release_all(&self, holder: &HolderId) -> Result<u64, StoreError> {
        self.0.release_all(holder).await
    }
    async fn force_release(&self, key: &LeaseKey) -> Result<bool, StoreError> {
        self.0.force_release(key).await
    }
    async fn get(&self, key: &LeaseKey) -> Result<Option<LeaseRecord>, StoreError> {
        self.0.get(key).await
    }
    async fn list_valid(
        &self,
        namespace: Option<&Namespace>,
        prefix: &str,
    ) -> Result<Vec<LeaseRecord>, StoreError> {
        self.0.list_valid(namespace, prefix).await
    }
    async fn purge(
        &self,
        namespace: Option<&Namespace>,
        older_than: Duration,
    ) -> Result<u64, StoreError> {
        self.0.purge(namespace, older_than).await
    }
    async fn db_now(&self) -> Result<DbInstant, StoreError> {
        self.0.db_now().await
    }
}
