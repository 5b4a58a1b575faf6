//! The fault layer's batched grant: one faulty call for the whole batch, passed to the inner
//! store's own `begin_tenure_many` (the SQL stores' batched statements), and the put-back
//! [`StoreBug::BatchGrantAnswersOwnRow`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use leasehold::engine::Term;
use leasehold::store::AcquireOutcome;
use leasehold::{HolderId, LeaseKey, LeaseRecord, LeaseValue, StoreError};

use super::{FaultStore, Grant};
use crate::StoreBug;

/// One answer per key, as `begin_tenure_many` gives them.
type Answers = Vec<Result<AcquireOutcome, StoreError>>;

impl FaultStore {
    /// `begin_tenure_many` under one drawn fault (the SQL-level ones on the first key); each
    /// key's grant is logged once the inner store answered.
    pub(super) async fn grant_many(
        &self,
        holder: &HolderId,
        keys: &[LeaseKey],
        term: Term,
        value: Option<&LeaseValue>,
    ) -> Result<Answers, StoreError> {
        if matches!(
            self.bug,
            Some(StoreBug::FailedCommitReportedAsSuccess { .. } | StoreBug::GrantOverOwnLiveRow)
        ) {
            // Those bugs are put back on the single grant: a batch goes through it key by key.
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                out.push(self.grant(key, holder, term, Grant::New, value).await);
            }
            return Ok(out);
        }
        self.dice
            .counts
            .batched_grants
            .fetch_add(1, Ordering::Relaxed);
        let (inner, rec, dice) = (
            Arc::clone(&self.inner),
            self.rec.clone(),
            Arc::clone(&self.dice),
        );
        let (h, list, v) = (holder.clone(), keys.to_vec(), value.cloned());
        let blind = self.bug == Some(StoreBug::BatchGrantAnswersOwnRow);
        let call = async move {
            // The put-back bug's reads before the statement, which (like the batch's skip-locked
            // and existence reads) do not see another session's uncommitted grant.
            let mut seen: Vec<Option<LeaseRecord>> = Vec::new();
            if blind {
                for key in &list {
                    seen.push(inner.get(key).await.ok().flatten());
                }
            }
            let mut out = inner.begin_tenure_many(&h, &list, term, v.as_ref()).await?;
            for (key, item) in list.iter().zip(&out) {
                rec.acquired(key, &h, item);
            }
            if blind {
                for (item, before) in out.iter_mut().zip(&seen) {
                    if let Some(lie) = own_row_as_granted(item, before.as_ref(), &h) {
                        dice.counts.lies.fetch_add(1, Ordering::Relaxed);
                        *item = Ok(lie);
                    }
                }
            }
            Ok(out)
        };
        self.faulty("begin_tenure_many", keys.first().map(|k| (k, holder)), call)
            .await
    }
}

/// The put-back defect's effect: an item answered `HeldBy` this holder id, for a row the reads
/// before the statement did not see live with that token (another session's uncommitted grant,
/// committed while the batch waited), is answered `Acquired` with the row's token and end: the
/// statement never wrote it. (The MySQL code had it only for rows absent from its reads, its
/// upsert path; the effect is put back wherever the batch did not see the row, which the
/// simulation reaches far more often.)
fn own_row_as_granted(
    item: &Result<AcquireOutcome, StoreError>,
    before: Option<&LeaseRecord>,
    holder: &HolderId,
) -> Option<AcquireOutcome> {
    let Ok(AcquireOutcome::HeldBy {
        holder: by,
        token,
        until,
    }) = item
    else {
        return None;
    };
    let seen = before.is_some_and(|r| r.held && r.holder == *holder && r.token == *token);
    (by == holder && !seen).then_some(AcquireOutcome::Acquired {
        token: *token,
        until: *until,
    })
}
