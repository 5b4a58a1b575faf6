//! Group commit of grants and releases: requests asked for while earlier statements of the same
//! kind are still in flight go out together as one batched store call
//! ([`LeaseStore::begin_tenure_many`], [`LeaseStore::release_batch`]): one transaction, one
//! commit for many callers.
//!
//! Batching adds no wait of its own: a request asked for while fewer than [`IN_FLIGHT`]
//! statements of its kind are out is sent at once (alone, as a plain `begin_tenure` or
//! `release`); only requests that arrive while those are out wait, for the first of them to
//! answer, and then go together. So a lone grant or release costs what it cost before, and a
//! burst (many lock callers, a hundred thousand lease tasks started at once) costs one statement
//! per batch instead of one per request.
//!
//! Waiting is safe: the lease machine counts a grant's local deadline from the instant it
//! *asked*, so a grant that waited only has a shorter local deadline; a release is sent after the
//! tenure's belief ended, so a release that waits only keeps the row a moment longer; and nothing
//! is answered before the statement committed.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::BoxFuture;
use leasehold_core::{AcquireOutcome, HolderId, LeaseKey, ReleaseOutcome, StoreFailure, Term};
use leasehold_storage::{LeaseStore, RenewItem, StoreError};
use tokio::sync::oneshot;

/// How many statements of one kind a coalescer keeps in flight at once.
pub const IN_FLIGHT: usize = 2;
/// The most requests in one batched call (the store splits larger batches itself).
pub const PER_BATCH: usize = 1_000;

/// The answers of one batched store call, aligned with its items.
pub type Answers<A> = Result<Vec<Result<A, StoreError>>, StoreError>;

/// What a [`Coalescer`] batches: the requests that may share a statement (a `Group`), one
/// request's item, its answer, and the store calls for one and for many.
pub trait Kind: Unpin + 'static {
    /// Requests of one group may share a statement.
    type Group: Clone + Eq + Hash + Unpin + Send + 'static;
    /// One request.
    type Item: Send + Unpin + 'static;
    /// One request's answer.
    type Answer: Send + 'static;
    /// The name of the batched call, for logs and errors.
    const OP: &'static str;
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
}

/// New tenures ([`LeaseStore::begin_tenure`] / [`LeaseStore::begin_tenure_many`]), grouped by
/// holder and term.
#[derive(Debug)]
pub struct Grants;

impl Kind for Grants {
    type Group = (HolderId, Term);
    type Item = LeaseKey;
    type Answer = AcquireOutcome;
    const OP: &'static str = "begin_tenure_many";

    fn one(
        store: Arc<dyn LeaseStore>,
        (holder, term): (HolderId, Term),
        key: LeaseKey,
    ) -> BoxFuture<'static, Result<AcquireOutcome, StoreError>> {
        Box::pin(async move { store.begin_tenure(&key, &holder, term).await })
    }

    fn many(
        store: Arc<dyn LeaseStore>,
        (holder, term): (HolderId, Term),
        keys: Vec<LeaseKey>,
    ) -> BoxFuture<'static, Answers<AcquireOutcome>> {
        Box::pin(async move { store.begin_tenure_many(&holder, &keys, term).await })
    }
}

/// Releases of named tenures ([`LeaseStore::release`] / [`LeaseStore::release_batch`]),
/// grouped by holder.
#[derive(Debug)]
pub struct Releases;

impl Kind for Releases {
    type Group = HolderId;
    type Item = RenewItem;
    type Answer = ReleaseOutcome;
    const OP: &'static str = "release_batch";

    fn one(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        item: RenewItem,
    ) -> BoxFuture<'static, Result<ReleaseOutcome, StoreError>> {
        Box::pin(async move { store.release(&item.key, &holder, item.token).await })
    }

    fn many(
        store: Arc<dyn LeaseStore>,
        holder: HolderId,
        items: Vec<RenewItem>,
    ) -> BoxFuture<'static, Answers<ReleaseOutcome>> {
        Box::pin(async move { store.release_batch(&holder, &items).await })
    }
}

/// Coalesces grants.
pub type GrantBatcher = Coalescer<Grants>;
/// Coalesces releases.
pub type ReleaseBatcher = Coalescer<Releases>;
/// Asks the [`GrantBatcher`] for a new tenure.
pub type QueueGrant = Queue<Grants>;
/// Asks the [`ReleaseBatcher`] to release a tenure.
pub type QueueRelease = Queue<Releases>;

/// The answer to one [`Queue`] request.
pub type Reply<K> = Result<<K as Kind>::Answer, StoreFailure>;

/// Asks a [`Coalescer`] for one request of `group`; the answer comes back on `reply`.
pub struct Queue<K: Kind> {
    /// Which requests it may share a statement with.
    pub group: K::Group,
    /// The request.
    pub item: K::Item,
    /// Where the answer goes (dropped unanswered only if the coalescer stops).
    pub reply: oneshot::Sender<Reply<K>>,
}

impl<K: Kind> std::fmt::Debug for Queue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("op", &K::OP)
            .finish_non_exhaustive()
    }
}

impl<K: Kind> Message for Queue<K> {
    type Result = ();
}

type Waiting<K> = Vec<(<K as Kind>::Item, oneshot::Sender<Reply<K>>)>;

/// Coalesces requests of one [`Kind`], see the module docs.
///
/// # Lifecycle
/// ## Started
/// Waits for requests. Lives as long as its address is held.
/// ## Stopped
/// Requests still queued are dropped; their senders see the reply channel closed.
pub struct Coalescer<K: Kind> {
    store: Arc<dyn LeaseStore>,
    /// The bound of one statement (the lease machines stop waiting then anyway).
    limit: Duration,
    queued: HashMap<K::Group, Waiting<K>>,
    /// Groups with requests waiting, oldest first.
    order: VecDeque<K::Group>,
    in_flight: usize,
}

impl<K: Kind> std::fmt::Debug for Coalescer<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer")
            .field("op", &K::OP)
            .field("queued", &self.queued.values().map(Vec::len).sum::<usize>())
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl<K: Kind> Coalescer<K> {
    /// A coalescer calling `store`, each statement bounded by `limit`.
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

    /// Sends the oldest waiting group's requests (up to [`PER_BATCH`]) while fewer than
    /// [`IN_FLIGHT`] statements are out.
    fn flush(&mut self, ctx: &mut Context<Self>) {
        while self.in_flight < IN_FLIGHT {
            let Some(group) = self.order.pop_front() else {
                return;
            };
            let Some(waiting) = self.queued.get_mut(&group) else {
                continue;
            };
            // Callers that stopped waiting (their machine gave up) are not asked for.
            waiting.retain(|(_, reply)| !reply.is_closed());
            let n = waiting.len().min(PER_BATCH);
            let batch: Vec<_> = waiting.drain(..n).collect();
            if waiting.is_empty() {
                self.queued.remove(&group);
            } else {
                self.order.push_back(group.clone());
            }
            if batch.is_empty() {
                continue;
            }
            let (mut items, replies): (Vec<K::Item>, Vec<_>) = batch.into_iter().unzip();
            let (store, size) = (Arc::clone(&self.store), items.len());
            // A request alone is the plain statement: no transaction.
            let call = match items.pop() {
                Some(item) if items.is_empty() => {
                    let one = K::one(store, group, item);
                    Box::pin(async move { Ok(vec![one.await]) }) as BoxFuture<'static, _>
                }
                Some(last) => {
                    items.push(last);
                    K::many(store, group, items)
                }
                None => continue,
            };
            self.in_flight += 1;
            let fut = crate::detached::detached(K::OP, self.limit, call);
            ctx.spawn(
                actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                    act.in_flight -= 1;
                    answer::<K>(result, replies, size);
                    act.flush(ctx);
                }),
            );
        }
    }
}

/// Routes a batch's answers to their callers; a failed batch fails each of them.
fn answer<K: Kind>(
    result: Answers<K::Answer>,
    replies: Vec<oneshot::Sender<Reply<K>>>,
    size: usize,
) {
    match result {
        Ok(answers) if answers.len() == size => {
            for (answer, reply) in answers.into_iter().zip(replies) {
                let _ = reply.send(answer.map_err(|e| {
                    crate::metrics::store_error(K::OP);
                    StoreFailure::new(e.to_string())
                }));
            }
        }
        Ok(answers) => {
            let e = StoreFailure::new(format!(
                "{}: {} answers to {size} requests",
                K::OP,
                answers.len()
            ));
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
        Err(e) => {
            log::warn!("{}: a batch of {size} failed: {e}", K::OP);
            crate::metrics::store_error(K::OP);
            let e = StoreFailure::new(e.to_string());
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}

impl<K: Kind> Actor for Coalescer<K> {
    type Context = Context<Self>;
}

impl<K: Kind> Handler<Queue<K>> for Coalescer<K> {
    type Result = ();

    fn handle(&mut self, msg: Queue<K>, ctx: &mut Context<Self>) {
        let waiting = self.queued.entry(msg.group.clone()).or_default();
        if waiting.is_empty() {
            self.order.push_back(msg.group);
        }
        waiting.push((msg.item, msg.reply));
        self.flush(ctx);
    }
}

/// Sends `item` through `coalescer` and waits for its answer, at most `limit`.
pub(crate) async fn ask<K: Kind>(
    coalescer: &Addr<Coalescer<K>>,
    group: K::Group,
    item: K::Item,
    limit: Duration,
) -> Reply<K> {
    let (reply, answer) = oneshot::channel();
    coalescer.do_send(Queue { group, item, reply });
    match tokio::time::timeout(limit, answer).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err(StoreFailure::new(format!("{}: the batcher stopped", K::OP))),
        Err(_) => Err(StoreFailure::new(format!(
            "{}: no answer within {limit:?}",
            K::OP
        ))),
    }
}
