//! Defects put back as store decorators, so that the check can show it catches each on every
//! backend. Each changes what the store does or answers, not only what is recorded:
//! - [`BelievesHolderId`]: the defect of the MySQL group-commit grant, at the store layer: a
//!   batched grant answers a live row of the caller's own holder id `Acquired` with that row's
//!   token and end, where `begin_tenure` answers `HeldBy`.
//! - [`RenewsLapsed`]: a renewal that extends a lapsed tenure (only expiry shows it).
//! - [`GrantsAPrefix`]: an all-or-nothing grant that is not one step.

use async_trait::async_trait;
use leasehold_storage::layer::StoreLayer;
use leasehold_storage::{
    AcquireOutcome, AllOutcome, BatchRenewal, FencingToken, Grant, HolderId, LeaseKey, LeaseStore,
    LeaseValue, RenewOutcome, SeaOrmStore, Store, StoreError, TenureRef, Term,
};
use sea_orm::ConnectionTrait;

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

/// A store whose renewals extend a lapsed tenure: where the store answers `Lost` (or `false`),
/// it writes the row's end again if the row is still that tenure (by holder and token, whatever
/// its end) and answers `Renewed`. A holder that paused past its end believes it never lost the
/// lease, although another holder may have seen it free meanwhile.
pub struct RenewsLapsed(pub SeaOrmStore);

impl RenewsLapsed {
    /// Extends the tenure `holder`/`token` of `key` whatever its end: whether it did.
    async fn extend(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> bool {
        let (t, now) = (self.0.table(), self.0.now_sql());
        let update = format!(
            "UPDATE {t} SET lease_end_time = {now} + {}, gmt_modified = {now} \
             WHERE namespace = '{}' AND lease_name = '{}' AND holder = '{}' AND version = {} \
             AND status = 1",
            term.as_millis_i64(),
            key.namespace.as_str(),
            key.name.as_str(),
            holder.as_str(),
            token.get()
        );
        matches!(
            self.0.connection().execute_unprepared(&update).await,
            Ok(done) if done.rows_affected() == 1
        )
    }
}

#[async_trait]
impl StoreLayer for RenewsLapsed {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    async fn renew(
        &self,
        key: &LeaseKey,
        holder: &HolderId,
        token: FencingToken,
        term: Term,
    ) -> Result<RenewOutcome, StoreError> {
        let answer = self.0.renew(key, holder, token, term).await?;
        if answer == RenewOutcome::Lost && self.extend(key, holder, token, term).await {
            return Ok(RenewOutcome::Renewed);
        }
        Ok(answer)
    }

    async fn renew_batch(
        &self,
        holder: &HolderId,
        items: &[TenureRef],
        term: Term,
    ) -> Result<Vec<BatchRenewal>, StoreError> {
        let mut answers = self.0.renew_batch(holder, items, term).await?;
        for (answer, it) in answers.iter_mut().zip(items) {
            if *answer == BatchRenewal::Lost && self.extend(&it.key, holder, it.token, term).await {
                *answer = BatchRenewal::Renewed;
            }
        }
        Ok(answers)
    }
}

/// A store whose `begin_tenure_all` grants its keys one at a time, pausing between them, and
/// stops at the first live one: it answers that refusal with the keys before it still granted
/// (a prefix), and a grant of every key that was not one instant.
pub struct GrantsAPrefix(pub SeaOrmStore);

#[async_trait]
impl StoreLayer for GrantsAPrefix {
    fn inner(&self) -> &dyn Store {
        &self.0
    }

    async fn begin_tenure_all(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
    ) -> Result<AllOutcome, StoreError> {
        let mut tenures = Vec::with_capacity(keys.len());
        for key in keys {
            match self
                .0
                .begin_tenure(key, holder, Grant::New, term, None)
                .await?
            {
                AcquireOutcome::Acquired { token, until } => tenures.push((token, until)),
                AcquireOutcome::HeldBy {
                    holder,
                    until,
                    token,
                } => {
                    return Ok(AllOutcome::HeldBy {
                        key: key.clone(),
                        holder,
                        token,
                        until,
                    });
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        Ok(AllOutcome::Acquired { tenures })
    }
}
