//! The defect of the MySQL group-commit grant, put back as a decorator so that the check can
//! show it catches it on any backend: a batched grant answers a live row of the caller's own
//! holder id `Acquired` with that row's token and end (the row's holder id alone decides the
//! item), where `begin_tenure` answers `HeldBy`.

use async_trait::async_trait;
use leasehold_storage::layer::StoreLayer;
use leasehold_storage::{
    AcquireOutcome, HolderId, LeaseKey, LeaseStore, LeaseValue, SeaOrmStore, Store, StoreError,
    Term,
};

/// A store whose `begin_tenure_many` believes the holder id (every other call passes to the
/// SQL store).
pub struct BelievesHolderId(pub SeaOrmStore);

#[async_trait]
impl StoreLayer for BelievesHolderId {
    fn inner(&self) -> &dyn Store {
        &self.0
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
}
