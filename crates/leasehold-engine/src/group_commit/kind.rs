//! What a group commit groups ([`Kind`]): grants ([`Grants`]) and releases ([`Releases`]), each
//! with its store call for one request and for many.

use std::hash::Hash;
use std::sync::Arc;

use futures::future::BoxFuture;
use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, LeaseValue, ReleaseOutcome, Term};
use leasehold_storage::{Grant, LeaseStore, StoreError, TenureRef};

/// The answers of one batched store call, aligned with its items.
pub(crate) type Answers<A> = Result<Vec<Result<A, StoreError>>, StoreError>;

/// What a [`GroupCommit`](super::GroupCommit) batches: the requests that may share a statement (a `Group`), one
/// request's item, its answer, and the store calls for one and for many.
pub(crate) trait Kind: Unpin + 'static {
    /// Requests of one group may share a statement.
    type Group: Clone + Eq + Hash + Unpin + Send + 'static;
    /// One request.
    type Item: Clone + Send + Unpin + 'static;
    /// One request's answer.
    type Answer: Send + 'static;
    /// The name of the batched call, for logs and errors.
    const OP: &'static str;
    /// Admission control (see the module docs): requests wait while renewals are behind, stale
    /// ones are answered without a statement, and answers nobody took are handed to
    /// [`Kind::unclaimed`].
    const ADMISSION: bool = false;
    /// The store call for one request alone.
    fn one(
        store: Arc<dyn LeaseStore>,
        group: Self::Group,
        item: Self::Item,
    ) -> BoxFuture<'static, Result<Self::Answer, StoreError>>;
    /// The batched store call, its answers aligned with `items`.
    fn many(
        store: Arc<dyn LeaseStore>,
        group: Self::Group,
        items: Vec<Self::Item>,
    ) -> BoxFuture<'static, Answers<Self::Answer>>;
    /// Undoes answers whose callers had stopped waiting (with [`Kind::ADMISSION`]); `None`:
    /// nothing to undo.
    fn unclaimed(
        store: Arc<dyn LeaseStore>,
        group: Self::Group,
        answered: Vec<(Self::Item, Self::Answer)>,
    ) -> Option<BoxFuture<'static, ()>> {
        let _ = (store, group, answered);
        None
    }
}

/// New tenures ([`LeaseStore::begin_tenure`] / [`LeaseStore::begin_tenure_many`]), grouped by
/// holder, term and value (the tasks of one service often share a value: its address).
#[derive(Debug)]
pub(crate) struct Grants;

impl Kind for Grants {
    type Group = (HolderId, Term, Option<LeaseValue>);
    type Item = LeaseKey;
    type Answer = AcquireOutcome;
    const OP: &'static str = "begin_tenure_many";
    const ADMISSION: bool = true;

    fn one(
        store: Arc<dyn LeaseStore>,
        (holder, term, value): (HolderId, Term, Option<LeaseValue>),
        key: LeaseKey,
    ) -> BoxFuture<'static, Result<AcquireOutcome, StoreError>> {
        Box::pin(async move {
            store
                .begin_tenure(&key, &holder, Grant::New, term, value.as_ref())
                .await
        })
    }

    fn many(
        store: Arc<dyn LeaseStore>,
        (holder, term, value): (HolderId, Term, Option<LeaseValue>),
        keys: Vec<LeaseKey>,
    ) -> BoxFuture<'static, Answers<AcquireOutcome>> {
        Box::pin(async move {
            store
                .begin_tenure_many(&holder, &keys, term, value.as_ref())
                .await
        })
    }

    /// Grants whose callers had stopped waiting: released by their tokens (only those tenures
    /// end; nobody believes in them).
    fn unclaimed(
        store: Arc<dyn LeaseStore>,
        (holder, _, _): (HolderId, Term, Option<LeaseValue>),
        answered: Vec<(LeaseKey, AcquireOutcome)>,
    ) -> Option<BoxFuture<'static, ()>> {
        let items: Vec<TenureRef> = answered
            .into_iter()
            .filter_map(|(key, answer)| match answer {
                AcquireOutcome::Acquired { token, .. } => Some(TenureRef { key, token }),
                AcquireOutcome::HeldBy { .. } => None,
            })
            .collect();
        if items.is_empty() {
            return None;
        }
        Some(Box::pin(async move {
            let n = items.len();
            match store.release_batch(&holder, &items).await {
                Ok(_) => tracing::info!(
                    holder = holder.as_str(),
                    released = n,
                    "released grants that answered after their callers stopped waiting"
                ),
                Err(e) => tracing::warn!(
                    holder = holder.as_str(),
                    grants = n,
                    error = %e,
                    "releasing grants nobody waited for failed; they lapse at their term"
                ),
            }
        }))
    }
}

/// Releases of named tenures ([`LeaseStore::release`] / [`LeaseStore::release_batch`]),
/// grouped by holder.
#[derive(Debug)]
pub(crate) struct Releases;

impl Kind for Releases {
    type Group = HolderId;
    type Item = TenureRef;
    type Answer = ReleaseOutcome;
    const OP: &'static str = "release_batch";

    fn one(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        item: TenureRef,
    ) -> BoxFuture<'static, Result<ReleaseOutcome, StoreError>> {
        Box::pin(async move { store.release(&item.key, &holder, item.token).await })
    }

    fn many(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        items: Vec<TenureRef>,
    ) -> BoxFuture<'static, Answers<ReleaseOutcome>> {
        Box::pin(async move { store.release_batch(&holder, &items).await })
    }
}
