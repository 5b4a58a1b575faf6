//! How a [`LeaseActor`](super::LeaseActor) renews its live tenure: one port, [`RenewRoute`],
//! chosen when the actor is built, asked once per [`Command::Renew`].
//!
//! [`Command::Renew`]: leasehold_core::Command::Renew

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::Addr;
use futures::future::Either;
use leasehold_core::{FencingToken, HolderId, LeaseKey, RenewOutcome, StoreFailure, Term};
use leasehold_storage::{LeaseStore, TenureRef};
use tokio::sync::oneshot;

use crate::renew_group::{QueueRenew, RenewGroup};

/// Where an actor's renewals go. Every route is bounded and answers what the machine
/// understands.
#[derive(Debug, Clone)]
pub(crate) enum RenewRoute {
    /// One `renew` statement of its own, bounded by the request timeout.
    Direct,
    /// The engine's group commit of renewals ([`RenewGroup`]): renewals due within one window
    /// go out as one statement (bounded there).
    Group(Arc<Addr<RenewGroup>>),
}

/// One renewal asked of a [`RenewRoute`].
pub(crate) struct RenewAsk {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) key: LeaseKey,
    pub(crate) holder: HolderId,
    pub(crate) token: FencingToken,
    pub(crate) term: Term,
    /// The request timeout.
    pub(crate) limit: Duration,
}

/// The route of an actor given none. Shared, so an actor costs no allocation for it.
static DIRECT: LazyLock<Arc<RenewRoute>> = LazyLock::new(|| Arc::new(RenewRoute::Direct));

impl RenewRoute {
    /// The default route (see [`RenewRoute::Direct`]), shared.
    pub(crate) fn direct() -> Arc<RenewRoute> {
        Arc::clone(&DIRECT)
    }

    /// Asks for `ask`'s renewal. The group's request is queued at once; a direct statement is
    /// sent when the answer is first awaited.
    pub(crate) fn ask(
        &self,
        ask: RenewAsk,
    ) -> impl Future<Output = Result<RenewOutcome, StoreFailure>> + Send + 'static + use<> {
        let RenewAsk {
            store,
            key,
            holder,
            token,
            term,
            limit,
        } = ask;
        match self {
            RenewRoute::Group(renewer) => {
                let (reply, answer) = oneshot::channel();
                renewer.do_send(QueueRenew {
                    holder,
                    item: TenureRef { key, token },
                    term,
                    reply,
                });
                Either::Left(async move {
                    answer
                        .await
                        .unwrap_or_else(|_| Err(StoreFailure::new("the batch renewer stopped")))
                })
            }
            RenewRoute::Direct => Either::Right(async move {
                let (failed_key, failed_holder) = (key.clone(), holder.clone());
                let renewed = crate::detached::detached("renew", limit, async move {
                    store.renew(&key, &holder, token, term).await
                })
                .await;
                super::store_failure(&failed_key, &failed_holder, "renew", renewed)
            }),
        }
    }
}
