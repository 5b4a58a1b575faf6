//! How a [`LeaseActor`](super::LeaseActor) asks for a new tenure: one port, [`GrantRoute`],
//! chosen when the actor is built, asked once per [`Command::TryAcquire`].
//!
//! [`Command::TryAcquire`]: leasehold_core::Command::TryAcquire

use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use actix::Addr;
use futures::future::Either;
use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, LeaseValue, StoreFailure, Term};
use leasehold_storage::{Grant, LeaseStore};
use tokio::time::Instant;

use crate::group_commit::GrantGroup;
use crate::joint::JointGrant;

/// Where an actor's grants go. Every route is bounded and answers what the machine
/// understands; a grant that answers after its caller gave up is released.
#[derive(Debug, Clone)]
pub(crate) enum GrantRoute {
    /// One `begin_tenure` of its own. With `reclaim`, a live row of this holder id that the
    /// actor does not believe in (a dead predecessor's) is taken over by compare-and-set on
    /// its token.
    Direct {
        /// Take over this holder's own live rows.
        reclaim: bool,
    },
    /// The engine's group commit: grants asked together go out as one statement.
    Group(Arc<Addr<GrantGroup>>),
    /// Part of a multi-lock: one grant for the whole set (bounded there).
    Joint(Arc<JointGrant>),
}

/// One grant asked of a [`GrantRoute`].
pub(crate) struct GrantAsk {
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) key: LeaseKey,
    pub(crate) holder: HolderId,
    pub(crate) term: Term,
    pub(crate) value: Option<LeaseValue>,
    /// When the machine asked: a batched grant that waited past half its patience is refused.
    pub(crate) now: Instant,
    /// The request timeout.
    pub(crate) limit: Duration,
}

/// The route of an actor given none: one statement of its own, no take-over. Shared, so an
/// actor costs no allocation for it.
static DIRECT: LazyLock<Arc<GrantRoute>> =
    LazyLock::new(|| Arc::new(GrantRoute::Direct { reclaim: false }));

impl GrantRoute {
    /// The default route (see [`GrantRoute::Direct`]), shared.
    pub(crate) fn direct() -> Arc<GrantRoute> {
        Arc::clone(&DIRECT)
    }

    /// Asks for `ask`'s grant. A multi-lock's part is registered with its grant at once; the
    /// other routes send their statement when the answer is first awaited.
    pub(crate) fn ask(
        &self,
        ask: GrantAsk,
    ) -> impl Future<Output = Result<AcquireOutcome, StoreFailure>> + Send + 'static + use<> {
        let GrantAsk {
            store,
            key,
            holder,
            term,
            value,
            now,
            limit,
        } = ask;
        match self {
            GrantRoute::Joint(joint) => Either::Left(joint.ask(key, term)),
            GrantRoute::Group(granter) => {
                // Bounded like any store call: a batch that answers late is not waited for.
                let granter = Arc::clone(granter);
                Either::Right(Either::Left(async move {
                    crate::group_commit::ask(&granter, (holder, term, value), key, now, limit).await
                }))
            }
            GrantRoute::Direct { reclaim } => {
                let reclaim = *reclaim;
                let (late_store, late_key, late_holder) =
                    (Arc::clone(&store), key.clone(), holder.clone());
                let (failed_key, failed_holder) = (key.clone(), holder.clone());
                let grant = async move {
                    let outcome = store
                        .begin_tenure(&key, &holder, Grant::New, term, value.as_ref())
                        .await?;
                    match outcome {
                        // A live row of this holder id that this actor does not believe in: a
                        // dead predecessor's, when the application says so. Taken over by
                        // compare-and-set on its token, so nothing newer can be ended.
                        AcquireOutcome::HeldBy {
                            holder: ref seen,
                            token,
                            ..
                        } if reclaim && *seen == holder => {
                            store
                                .begin_tenure(
                                    &key,
                                    &holder,
                                    Grant::TakeOver(token),
                                    term,
                                    value.as_ref(),
                                )
                                .await
                        }
                        other => Ok(other),
                    }
                };
                // A grant that answers after this attempt was given up is released at once, in
                // task mode as in lock mode: the machine forgets an attempt it gave up on.
                let fut = crate::late::grant_or_release(
                    late_store,
                    late_key,
                    late_holder,
                    grant,
                    now,
                    limit,
                );
                Either::Right(Either::Right(async move {
                    super::store_failure(&failed_key, &failed_holder, "acquire", fut.await)
                }))
            }
        }
    }
}
