//! The store port's default batch calls, one call at a time over a store's own single calls:
//! what [`LeaseStore`]'s default methods run, public so that a decorator
//! ([`StoreLayer`](crate::layer::StoreLayer)) that changes the single calls can keep the batch
//! calls built on its own.

use leasehold_core::{
    AcquireOutcome, DbInstant, FencingToken, HolderId, LeaseKey, LeaseValue, ReleaseOutcome, Term,
};

use crate::{AllOutcome, BatchRenewal, Grant, LeaseStore, StoreError, TenureRef};

/// [`LeaseStore::begin_tenure_many`] as `begin_tenure` ([`Grant::New`]) once per key of `store`.
///
/// # Errors
/// Never as a whole: each key's `Err` is in its place.
pub async fn begin_tenure_many<S: LeaseStore + ?Sized>(
    store: &S,
    holder: &HolderId,
    keys: &[LeaseKey],
    term: Term,
    value: Option<&LeaseValue>,
) -> Result<Vec<Result<AcquireOutcome, StoreError>>, StoreError> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        out.push(
            store
                .begin_tenure(key, holder, Grant::New, term, value)
                .await,
        );
    }
    Ok(out)
}

/// [`LeaseStore::begin_tenure_all`] not atomic at the database: `store`'s `begin_tenure` key by
/// key in key order and, on a refusal, `release` of the tenures it had granted.
///
/// # Errors
/// The first grant's `Err` (after releasing the tenures granted before it).
pub async fn begin_tenure_all<S: LeaseStore + ?Sized>(
    store: &S,
    holder: &HolderId,
    keys: &[LeaseKey],
    term: Term,
) -> Result<AllOutcome, StoreError> {
    let mut order: Vec<usize> = (0..keys.len()).collect();
    order.sort_by(|&a, &b| keys[a].cmp(&keys[b]));
    let mut granted: Vec<Option<(FencingToken, DbInstant)>> = vec![None; keys.len()];
    for &i in &order {
        let refused = match store
            .begin_tenure(&keys[i], holder, Grant::New, term, None)
            .await
        {
            Ok(AcquireOutcome::Acquired { token, until }) => {
                granted[i] = Some((token, until));
                continue;
            }
            Ok(AcquireOutcome::HeldBy {
                holder,
                until,
                token,
            }) => Ok(AllOutcome::HeldBy {
                key: keys[i].clone(),
                holder,
                token,
                until,
            }),
            Err(e) => Err(e),
        };
        for (j, g) in granted.iter().enumerate() {
            if let Some((token, _)) = g {
                let _ = store.release(&keys[j], holder, *token).await;
            }
        }
        return refused;
    }
    Ok(AllOutcome::Acquired {
        tenures: granted.into_iter().flatten().collect(),
    })
}

/// [`LeaseStore::renew_batch`] as `store`'s `renew_many` (which never answers `Unknown`).
///
/// # Errors
/// `renew_many`'s.
pub async fn renew_batch<S: LeaseStore + ?Sized>(
    store: &S,
    holder: &HolderId,
    items: &[TenureRef],
    term: Term,
) -> Result<Vec<BatchRenewal>, StoreError> {
    Ok(store
        .renew_many(holder, items, term)
        .await?
        .into_iter()
        .map(BatchRenewal::from)
        .collect())
}

/// [`LeaseStore::release_batch`] as `store`'s `release` once per item.
///
/// # Errors
/// Never as a whole: each item's `Err` is in its place.
pub async fn release_batch<S: LeaseStore + ?Sized>(
    store: &S,
    holder: &HolderId,
    items: &[TenureRef],
) -> Result<Vec<Result<ReleaseOutcome, StoreError>>, StoreError> {
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        out.push(store.release(&it.key, holder, it.token).await);
    }
    Ok(out)
}
