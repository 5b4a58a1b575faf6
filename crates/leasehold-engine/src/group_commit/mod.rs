//! Group commit of grants and releases: requests asked for while earlier statements of the same
//! kind are still in flight go out together as one batched store call
//! ([`LeaseStore::begin_tenure_many`], [`LeaseStore::release_batch`]): one transaction, one
//! commit for many callers.
//!
//! Batching adds no wait of its own: a request asked for while no statement of its kind is out
//! is sent at once, together with the requests that reached the group commit in the same turn
//! (its mailbox is drained first, no timer: a shard leaver's names and membership, the tasks of
//! one `start_lease_tasks`), and alone as a plain `begin_tenure` or `release` when there are
//! none; only requests that arrive while one is out wait, for it to answer, and then go
//! together. A second statement is sent beside the first (at most [`IN_FLIGHT`]) only for a
//! batch of at least [`PARALLEL_BATCH`] requests, or once the first has been out [`STALLED`] (a
//! row lock, a slow server: one slow statement never holds every other request of its kind): a
//! burst keeps two full statements in flight, while a handful of lock callers share one
//! statement instead of each paying its own (a second statement always allowed would send many
//! requests alone and cost the server more per request). So a lone grant or release costs one
//! plain statement, and a burst (many lock callers, a hundred thousand lease tasks started at
//! once) costs one statement per batch instead of one per request.
//!
//! Renewals have a group commit of their own, [`RenewGroup`](crate::RenewGroup), windowed
//! instead of in-flight driven; its module doc says why the two cannot be one.
//!
//! Waiting is safe: the lease machine counts a grant's local deadline from the instant it
//! *asked*, so a grant that waited only has a shorter local deadline; a release is sent after the
//! tenure's belief ended, so a release that waits only keeps the row a moment longer; and nothing
//! is answered before the statement committed.
//!
//! **Admission control** (grants only): a burst larger than the machine can serve must slow down,
//! not collapse. Three rules keep a grant from costing more than it brings:
//! - *Renewals come first.* While the service's renewals are behind
//!   ([`crate::renew_group::RenewPressure::behind`]), no grant statement is sent; the grants wait (and the held
//!   tenures keep renewing).
//! - *No statement for a caller about to give up.* A grant that has waited in the queue for more
//!   than half its caller's patience is answered at once with a failure instead (its machine
//!   backs off and asks again later, with a fresh deadline); first in, first out, under overload,
//!   would otherwise send mostly grants whose callers stop waiting before the commit.
//! - *A grant nobody takes is released.* A grant whose caller stopped waiting before the answer
//!   came is released by its token at once; left alone it would keep the row for a whole term,
//!   and its own task, asking again, would be refused by its own tenure all that time. A grant
//!   statement is therefore not abandoned when its callers give up but one request timeout
//!   later (see [`crate::late`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::BoxFuture;
use leasehold_core::{Clock, MonotonicClock, StoreFailure};
use leasehold_storage::LeaseStore;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::late::Waited;
use crate::renew_group::RenewPressure;

mod kind;

pub(crate) use kind::{Answers, Grants, Kind, Releases};

/// How many statements of one kind a group commit keeps in flight at once.
pub(crate) const IN_FLIGHT: usize = 2;
/// The fewest requests that go out as a statement beside one already in flight; smaller
/// batches wait for its answer, unless it has been out [`STALLED`].
pub(crate) const PARALLEL_BATCH: usize = 200;
/// A statement out this long counts as stalled: requests that would wait for it go out beside
/// it (however few they are).
pub const STALLED: Duration = Duration::from_millis(5);
/// While renewals are behind, the [`GrantGroup`] looks again this often.
pub(crate) const RECHECK: Duration = Duration::from_millis(20);
/// The most requests in one batched call (the store splits larger batches itself).
pub(crate) const PER_BATCH: usize = 1_000;

/// Group commit of grants.
pub(crate) type GrantGroup = GroupCommit<Grants>;
/// Group commit of releases.
pub(crate) type ReleaseGroup = GroupCommit<Releases>;

/// The answer to one [`Queue`] request.
pub(crate) type Reply<K> = Result<<K as Kind>::Answer, StoreFailure>;

/// Asks a [`GroupCommit`] for one request of `group`; the answer comes back on `reply`.
pub(crate) struct Queue<K: Kind> {
    /// Which requests it may share a statement with.
    pub group: K::Group,
    /// The request.
    pub item: K::Item,
    /// When the caller asked.
    pub asked: Instant,
    /// How long the caller waits for the answer from `asked`.
    pub patience: Duration,
    /// Where the answer goes (dropped unanswered only if the group commit stops).
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

/// A request waiting for its statement.
struct Asked<K: Kind> {
    item: K::Item,
    asked: Instant,
    patience: Duration,
    reply: oneshot::Sender<Reply<K>>,
}

impl<K: Kind> Asked<K> {
    /// Waited more than half its caller's patience: not worth a statement any more.
    fn stale(&self, now: Instant) -> bool {
        now.saturating_duration_since(self.asked) > self.patience / 2
    }
}

type Waiting<K> = VecDeque<Asked<K>>;

/// The group commit of requests of one [`Kind`], see the module docs.
///
/// # Lifecycle
/// ## Started
/// Waits for requests. Lives as long as its address is held.
/// ## Stopped
/// Requests still queued are dropped; their senders see the reply channel closed.
pub(crate) struct GroupCommit<K: Kind> {
    store: Arc<dyn LeaseStore>,
    /// The bound of one statement (the lease machines stop waiting then anyway).
    limit: Duration,
    queued: HashMap<K::Group, Waiting<K>>,
    /// Groups with requests waiting, oldest first.
    order: VecDeque<K::Group>,
    in_flight: usize,
    /// When the statement out alone was sent (with one in flight).
    lone_since: Option<Instant>,
    /// A look at [`STALLED`] after `lone_since` is scheduled.
    stall_check: bool,
    /// How the service's renewals are doing (grants wait while they are behind).
    pressure: Option<Arc<RenewPressure>>,
    /// A look after [`RECHECK`] is scheduled.
    recheck: bool,
    /// A flush is scheduled for when the mailbox has been drained.
    flush_due: bool,
}

impl<K: Kind> std::fmt::Debug for GroupCommit<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupCommit")
            .field("op", &K::OP)
            .field(
                "queued",
                &self.queued.values().map(VecDeque::len).sum::<usize>(),
            )
            .field("in_flight", &self.in_flight)
            .finish_non_exhaustive()
    }
}

impl<K: Kind> GroupCommit<K> {
    /// A group commit calling `store`, each statement bounded by `limit`.
    #[must_use]
    pub fn new(store: Arc<dyn LeaseStore>, limit: Duration) -> Self {
        Self {
            store,
            limit,
            queued: HashMap::new(),
            order: VecDeque::new(),
            in_flight: 0,
            lone_since: None,
            stall_check: false,
            pressure: None,
            recheck: false,
            flush_due: false,
        }
    }

    /// Grants wait while the renewals `pressure` watches are behind (see the module docs).
    #[must_use]
    pub fn with_renew_pressure(mut self, pressure: Option<Arc<RenewPressure>>) -> Self {
        self.pressure = pressure;
        self
    }

    /// Answers the stale requests at the front of every group (requests of a group queue in
    /// the order they were asked), without a statement.
    fn shed(&mut self, now: Instant) {
        let mut shed = 0usize;
        for waiting in self.queued.values_mut() {
            while waiting
                .front()
                .is_some_and(|a| a.reply.is_closed() || a.stale(now))
            {
                let Some(a) = waiting.pop_front() else { break };
                if a.reply.is_closed() {
                    continue;
                }
                shed += 1;
                let waited = now.saturating_duration_since(a.asked);
                let _ = a.reply.send(Err(StoreFailure::new(format!(
                    "{}: not sent: waited {waited:?} of the caller's {:?} behind earlier \
                     statements (overloaded; asked again later)",
                    K::OP,
                    a.patience
                ))));
            }
        }
        self.queued.retain(|_, waiting| !waiting.is_empty());
        if shed > 0 {
            tracing::debug!(
                op = K::OP,
                shed,
                "requests answered unsent: they waited more than half their patience (overloaded)"
            );
        }
    }

    /// Sends the oldest waiting group's requests (up to [`PER_BATCH`]) while no statement is
    /// out, or fewer than [`IN_FLIGHT`] are and the batch is at least [`PARALLEL_BATCH`] (and,
    /// with admission control, while renewals keep up).
    fn flush(&mut self, ctx: &mut Context<Self>) {
        if K::ADMISSION {
            let now = MonotonicClock.now();
            self.shed(now);
            if self.pressure.as_ref().is_some_and(|p| p.behind(now)) {
                if !self.recheck && !self.queued.is_empty() {
                    self.recheck = true;
                    ctx.run_later(RECHECK, |act, ctx| {
                        act.recheck = false;
                        act.flush(ctx);
                    });
                }
                return;
            }
        }
        while self.in_flight < IN_FLIGHT {
            if self.in_flight > 0
                && self
                    .order
                    .front()
                    .and_then(|g| self.queued.get(g))
                    .is_none_or(|w| w.len() < PARALLEL_BATCH)
            {
                // A small batch waits for the statement out — unless that one has stalled (a
                // row lock, a slow server): then it goes beside it, so one slow statement
                // never holds every other request of its kind.
                let now = MonotonicClock.now();
                match self.lone_since.map(|sent| sent + STALLED) {
                    Some(at) if at > now => {
                        if !self.stall_check && !self.order.is_empty() {
                            self.stall_check = true;
                            ctx.run_later(at.saturating_duration_since(now), |act, ctx| {
                                act.stall_check = false;
                                act.flush(ctx);
                            });
                        }
                        return;
                    }
                    Some(_) => {}
                    None => return,
                }
            }
            let Some(group) = self.order.pop_front() else {
                return;
            };
            let Some(waiting) = self.queued.get_mut(&group) else {
                continue;
            };
            // Callers that stopped waiting (their machine gave up) are not asked for.
            waiting.retain(|a| !a.reply.is_closed());
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
            let (mut items, replies): (Vec<K::Item>, Vec<_>) =
                batch.into_iter().map(|a| (a.item, a.reply)).unzip();
            // Kept to undo what nobody takes (with admission control).
            let kept = K::ADMISSION.then(|| (items.clone(), group.clone()));
            let (store, size) = (Arc::clone(&self.store), items.len());
            // A request alone is the plain statement: no transaction.
            let call = match items.pop() {
                Some(item) if items.is_empty() => {
                    let one = K::one(Arc::clone(&store), group, item);
                    Box::pin(async move { Ok(vec![one.await]) }) as BoxFuture<'static, _>
                }
                Some(last) => {
                    items.push(last);
                    K::many(Arc::clone(&store), group, items)
                }
                None => continue,
            };
            self.in_flight += 1;
            self.lone_since = (self.in_flight == 1).then(|| MonotonicClock.now());
            let limit = self.limit;
            // With admission control the statement runs on after its callers gave up (one
            // more request timeout), so that a grant committed late is seen and released.
            let bound = if K::ADMISSION {
                crate::late::statement_bound(limit)
            } else {
                limit
            };
            let fut = crate::detached::detached(K::OP, bound, call);
            ctx.spawn(
                actix::fut::wrap_future(fut).map(move |result, act: &mut Self, ctx| {
                    act.in_flight -= 1;
                    // The one left out (if any) was sent before this answer: count it as
                    // out since now, a conservative start for its stall.
                    act.lone_since = (act.in_flight == 1).then(|| MonotonicClock.now());
                    let unclaimed = answer::<K>(result, replies, size);
                    if let Some((items, group)) = kept {
                        undo::<K>(store, group, items, unclaimed, limit);
                    }
                    act.flush(ctx);
                }),
            );
        }
    }
}

/// Hands the answers nobody took (by index into `items`) to [`Kind::unclaimed`], as a bounded
/// task of its own.
fn undo<K: Kind>(
    store: Arc<dyn LeaseStore>,
    group: K::Group,
    items: Vec<K::Item>,
    unclaimed: Vec<(usize, K::Answer)>,
    limit: Duration,
) {
    if unclaimed.is_empty() {
        return;
    }
    let answered: Vec<_> = unclaimed
        .into_iter()
        .filter_map(|(i, a)| items.get(i).cloned().map(|item| (item, a)))
        .collect();
    if let Some(fut) = K::unclaimed(store, group, answered) {
        tokio::spawn(async move {
            let _ = crate::detached::detached(K::OP, limit, async move {
                fut.await;
                Ok(())
            })
            .await;
        });
    }
}

/// Routes a batch's answers to their callers; a failed batch fails each of them.
/// Returns the successful answers whose callers had stopped waiting, with their indices.
fn answer<K: Kind>(
    result: Answers<K::Answer>,
    replies: Vec<oneshot::Sender<Reply<K>>>,
    size: usize,
) -> Vec<(usize, K::Answer)> {
    let mut unclaimed = Vec::new();
    match result {
        Ok(answers) if answers.len() == size => {
            for (i, (answer, reply)) in answers.into_iter().zip(replies).enumerate() {
                let answer = answer.map_err(|e| {
                    crate::metrics::store_error(K::OP);
                    StoreFailure::new(e.to_string())
                });
                if let Err(Ok(answer)) = reply.send(answer) {
                    unclaimed.push((i, answer));
                }
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
            tracing::warn!(op = K::OP, size, error = %e, "a batched statement failed");
            crate::metrics::store_error(K::OP);
            let e = StoreFailure::new(e.to_string());
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
    unclaimed
}

impl<K: Kind> Actor for GroupCommit<K> {
    type Context = Context<Self>;
}

impl<K: Kind> Handler<Queue<K>> for GroupCommit<K> {
    type Result = ();

    fn handle(&mut self, msg: Queue<K>, ctx: &mut Context<Self>) {
        let waiting = self.queued.entry(msg.group.clone()).or_default();
        if waiting.is_empty() {
            self.order.push_back(msg.group);
        }
        waiting.push_back(Asked {
            item: msg.item,
            asked: msg.asked,
            patience: msg.patience,
            reply: msg.reply,
        });
        // Flushed once the mailbox is drained (actix handles every queued message before the
        // context's spawned items), in the same poll: requests that arrived together (a leaver's
        // names and its membership, the names a shard member now competes for, the tasks of one
        // `start_lease_tasks`) go out as one statement instead of the first alone and the rest a
        // round trip later. Nothing waits for it.
        if !self.flush_due {
            self.flush_due = true;
            ctx.spawn(actix::fut::ready(()).map(|(), act: &mut Self, ctx| {
                act.flush_due = false;
                act.flush(ctx);
            }));
        }
    }
}

/// Sends `item` of `group` through `commit` and waits for its answer: the caller (a lease
/// machine) asked at `asked` and waits `limit` from then. This gives up a twentieth of `limit`
/// earlier, so that an answer the machine would no longer take reaches the group commit as
/// unclaimed (and a grant is released) instead of arriving at the machine as a stale answer.
/// An answer sent just as this gives up is found in the closed channel and handed back to the
/// group commit as unclaimed too ([`crate::late::answer_by`]).
pub(crate) async fn ask<K: Kind>(
    commit: &Addr<GroupCommit<K>>,
    group: K::Group,
    item: K::Item,
    asked: Instant,
    limit: Duration,
) -> Reply<K> {
    let patience = crate::late::patience(limit);
    let (reply, answer) = oneshot::channel();
    // Kept to undo an answer found after giving up (with admission control).
    let kept = K::ADMISSION.then(|| (group.clone(), item.clone()));
    commit.do_send(Queue {
        group,
        item,
        asked,
        patience,
        reply,
    });
    match crate::late::answer_by(answer, asked + patience).await {
        Waited::Answered(result) => result,
        Waited::Dropped => Err(StoreFailure::new(format!("{}: the batcher stopped", K::OP))),
        Waited::Late(found) => {
            if let (Some(Ok(answer)), Some((group, item))) = (found, kept) {
                commit.do_send(Unclaimed::<K> {
                    group,
                    item,
                    answer,
                });
            }
            Err(StoreFailure::new(format!(
                "{}: no answer within {patience:?}",
                K::OP
            )))
        }
    }
}

/// An answer its caller found only after giving up ([`ask`]): undone like any answer nobody
/// took ([`Kind::unclaimed`]).
struct Unclaimed<K: Kind> {
    group: K::Group,
    item: K::Item,
    answer: K::Answer,
}

impl<K: Kind> Message for Unclaimed<K> {
    type Result = ();
}

impl<K: Kind> Handler<Unclaimed<K>> for GroupCommit<K> {
    type Result = ();

    fn handle(&mut self, msg: Unclaimed<K>, _ctx: &mut Context<Self>) {
        let store = Arc::clone(&self.store);
        undo::<K>(
            store,
            msg.group,
            vec![msg.item],
            vec![(0, msg.answer)],
            self.limit,
        );
    }
}
