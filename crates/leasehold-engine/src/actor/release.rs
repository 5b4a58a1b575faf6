//! How a [`LeaseActor`](super::LeaseActor) releases a tenure: one port, [`ReleaseRoute`],
//! chosen when the actor is built, asked once per [`Command::Release`].
//!
//! [`Command::Release`]: leasehold_core::Command::Release

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::Addr;
use futures::future::Either;
use leasehold_core::{FencingToken, HolderId, LeaseKey, ReleaseOutcome, StoreFailure};
use leasehold_storage::{LeaseStore, TenureRef};
use tokio::time::Instant;

use crate::group_commit::ReleaseGroup;

/// Where an actor's releases go. Every route is bounded and answers what the machine
/// understands.
#[derive(Debug, Clone)]
pub(crate) enum ReleaseRoute {
    /// One `release` statement of its own, bounded by the request timeout.
    Direct,
    /// The engine's group commit of releases: releases asked together go out as one statement.
    Group(Arc<Addr<ReleaseGroup>>),
}

/// One release asked of a [`ReleaseRoute`].
pub(crate) struct ReleaseAsk {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) key: LeaseKey,
    pub(crate) holder: HolderId,
    pub(crate) token: FencingToken,
    /// When the machine asked.
    pub(crate) now: Instant,
    /// The request timeout.
    pub(crate) limit: Duration,
}

/// The route of an actor given none. Shared, so an actor costs no allocation for it.
static DIRECT: LazyLock<Arc<ReleaseRoute>> = LazyLock::new(|| Arc::new(ReleaseRoute::Direct));

impl ReleaseRoute {
    /// The default route (see [`ReleaseRoute::Direct`]), shared.
    pub(crate) fn direct() -> Arc<ReleaseRoute> {
        Arc::clone(&DIRECT)
    }

    /// Asks for `ask`'s release; the statement is sent (or queued) when the answer is first
    /// awaited.
    pub(crate) fn ask(
        &self,
        ask: ReleaseAsk,
    ) -> impl Future<Output = Result<ReleaseOutcome, StoreFailure>> + Send + 'static + use<> {
        let ReleaseAsk {
            store,
            key,
            holder,
            token,
            now,
            limit,
        } = ask;
        match self {
            ReleaseRoute::Group(releaser) => {
                let releaser = Arc::clone(releaser);
                Either::Left(async move {
                    let item = TenureRef { key, token };
                    crate::group_commit::ask(&releaser, holder, item, now, limit).await
                })
            }
            ReleaseRoute::Direct => Either::Right(async move {
                let (failed_key, failed_holder) = (key.clone(), holder.clone());
                let released = crate::detached::detached("release", limit, async move {
                    store.release(&key, &holder, token).await
                })
                .await;
                super::store_failure(&failed_key, &failed_holder, "release", released)
            }),
        }
    }
}
