//! The grant batcher: new tenures asked for while an earlier grant statement of the same holder
//! and term is still in flight go out together as one
//! [`LeaseStore::begin_tenure_many`]: one transaction, one commit for many callers.
//!
//! Batching here adds no wait of its own: a grant asked for while fewer than
//! [`GRANTS_IN_FLIGHT`] statements are out is sent at once (alone, as a plain `begin_tenure`);
//! only grants that arrive while those are out wait, for the first of them to answer, and then
//! go together. So a lone grant costs what it cost before, and a burst (a thousand lock callers,
//! a hundred thousand lease tasks started at once) costs one statement per batch instead of one
//! per grant.
//!
//! Waiting is safe for the same reason as in the [`RenewBatcher`](crate::RenewBatcher): the lease
//! machine counts a grant's local deadline from the instant it *asked*, so a grant that waited
//! only has a shorter local deadline; and nothing is answered before the statement committed.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, StoreFailure, Term};
use leasehold_storage::LeaseStore;
use tokio::sync::oneshot;

/// How many grant statements one batcher keeps in flight at once.
pub const GRANTS_IN_FLIGHT: usize = 2;
/// The most grants in one statement (the store splits larger batches itself).
pub const GRANTS_PER_BATCH: usize = 1_000;

/// The answer to one [`QueueGrant`].
pub type GrantReply = Result<AcquireOutcome, StoreFailure>;

/// Asks the [`GrantBatcher`] to begin a new tenure of `key` for `holder`; the answer comes back
/// on `reply`.
#[derive(Debug)]
pub struct QueueGrant {
    /// Who asks.
    pub holder: HolderId,
    /// The lease.
    pub key: LeaseKey,
    /// The term to ask for.
    pub term: Term,
    /// Where the answer goes (dropped unanswered only if the batcher stops).
    pub reply: oneshot::Sender<GrantReply>,
}

impl Message for QueueGrant {
    type Result = ();
}

type Group = (HolderId, Term);

/// Coalesces grants, see the module docs.
///
/// # Lifecycle
/// ## Started
/// Waits for grants. Lives as long as its address is held.
/// ## Stopped
/// Grants still queued are dropped; their senders see the reply channel closed.
pub struct GrantBatcher {
    store: Arc<dyn LeaseStore>,
    /// The bound of one statement (the lease machines stop waiting then anyway).
    limit: Duration,
    queued: HashMap<Group, Vec<(LeaseKey, oneshot::Sender<GrantReply>)>>,
    /// Groups with grants waiting, oldest first.
    order: VecDeque<Group>,
    in_flight: usize,
}

impl std::fmt::Debug for GrantBatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantBatcher")
            .field("queued", &self.queued.values().map(Vec::len).sum::<usize>())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl GrantBatcher {
    /// A batcher granting through `store`, each statement bounded by `limit`.
    #[must_use]
    pub fn new(store: Arc<dyn LeaseStore>, limit: Duration) -> Self {
        Self {
            store,
            limit,
            queued: HashMap::new(),
            order: VecDeque::new(),
            in_flight: 0,
        }
    }

    /// Sends the oldest waiting group's grants (up to [`GRANTS_PER_BATCH`]) while fewer than
    /// [`GRANTS_IN_FLIGHT`] statements are out.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        while self.in_flight < GRANTS_IN_FLIGHT {
            let Some(group) = self.order.pop_front() else {
                return;
            };
            let Some(waiting) = self.queued.get_mut(&group) else {
                continue;
            };
            // Callers that stopped waiting (their machine gave up) are not asked for.
            waiting.retain(|(_, reply)| !reply.is_closed());
            let n = waiting.len().min(GRANTS_PER_BATCH);
            let batch: Vec<_> = waiting.drain(..n).collect();
            if waiting.is_empty() {
                self.queued.remove(&group);
            } else {
                self.order.push_back(group.clone());
            }
            if batch.is_empty() {
                continue;
            }
            self.in_flight += 1;
            let (keys, replies): (Vec<LeaseKey>, Vec<_>) = batch.into_iter().unzip();
            let (store, (holder, term)) = (Arc::clone(&self.store), group);
            let size = keys.len();
            // A grant alone is a plain `begin_tenure`: one statement, no transaction.
            let fut = crate::detached::detached("begin_tenure_many", self.limit, async move {
                if let [key] = keys.as_slice() {
                    return Ok(vec![store.begin_tenure(key, &holder, term).await]);
                }
                store.begin_tenure_many(&holder, &keys, term).await
            });
            ctx.spawn(actix::fut::wrap_future(fut).map(
                move |result, act: &mut Self, ctx| {
                    act.in_flight -= 1;
                    match result {
                        Ok(answers) if answers.len() == size => {
                            for (answer, reply) in answers.into_iter().zip(replies) {
                                let _ = reply.send(answer.map_err(|e| {
                                    crate::metrics::store_error("acquire");
                                    StoreFailure::new(e.to_string())
                                }));
                            }
                        }
                        Ok(answers) => {
                            let e = format!("{} answers to {size} grants", answers.len());
                            for reply in replies {
                                let _ = reply.send(Err(StoreFailure::new(e.clone())));
                            }
                        }
                        Err(e) => {
                            log::warn!("a batch of {size} grants failed: {e}");
                            crate::metrics::store_error("acquire");
                            let e = StoreFailure::new(e.to_string());
                            for reply in replies {
                                let _ = reply.send(Err(e.clone()));
                            }
                        }
                    }
                    act.flush(ctx);
                },
            ));
        }
    }
}

impl Actor for GrantBatcher {
    type Context = Context<Self>;
}

impl Handler<QueueGrant> for GrantBatcher {
    type Result = ();

    fn handle(&mut self, msg: QueueGrant, ctx: &mut Context<Self>) {
        let group = (msg.holder, msg.term);
        let waiting = self.queued.entry(group.clone()).or_default();
        if waiting.is_empty() {
            self.order.push_back(group);
        }
        waiting.push((msg.key, msg.reply));
        self.flush(ctx);
    }
}
