//! Locks on the engine: a lock is a lease actor whose machine takes one attempt, renews on
//! request and stops once its tenure has ended and settled. A hold is a lock switched to
//! automatic renewal. Also: prefix listings, release watches and fenced transactions.
//!
//! Every store call runs on the engine's runtime, bounded by the request timeout.

use std::any::Any;
use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{
    DbInstant, Event, FencingToken, HolderId, LeaseConfig, LeaseKey, LeaseRecord, Namespace,
    ReleaseOutcome, StoreFailure,
};
use leasehold_storage::{FencedTransaction, StoreError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::Belief;
use crate::actor::{LeaseActor, Listener};
use crate::detached::detached;
use crate::engine::{EngineError, LeaseEngine, Lookup, NewActor, Owner, stopped};

/// The answer of a lock's single attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The lock is ours until `local_deadline` unless renewed.
    Acquired {
        /// The tenure's fencing token.
        token: FencingToken,
        /// Its local deadline.
        local_deadline: Instant,
    },
    /// Someone holds it.
    Refused {
        /// Who.
        holder: HolderId,
        /// Their tenure's token.
        token: FencingToken,
        /// When their grant ends, by the database's clock.
        until: DbInstant,
    },
    /// The store failed or did not answer in time; a grant it may have made is released.
    Failed(StoreFailure),
}

/// The answer to a renewal on request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RenewAnswer {
    /// Renewed: the deadline moved.
    Renewed,
    /// The tenure had ended (lapsed, released, taken over) before it could be renewed.
    Lost,
}

/// Take the lock `key` once, as a lease actor of its own ([`Owner::Lock`]). Answers the
/// actor, its [`Belief`] and the receiver of the attempt's [`Attempt`]; the key is refused
/// with [`EngineError::Owned`] when anything of this service uses it (another lock included).
pub struct TakeLock {
    /// The lock.
    pub key: LeaseKey,
    /// The lock's configuration (its term is the ttl).
    pub config: LeaseConfig,
    /// Told about its notifications.
    pub listener: Listener,
    /// The belief to publish the lock's tenure to (made by the engine when `None`).
    pub belief: Option<Arc<Belief>>,
}

impl std::fmt::Debug for TakeLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TakeLock")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

/// What [`TakeLock`] answers.
pub type TakenLock = (Addr<LeaseActor>, Arc<Belief>, oneshot::Receiver<Attempt>);

impl Message for TakeLock {
    type Result = Result<TakenLock, EngineError>;
}

impl Handler<TakeLock> for LeaseEngine {
    type Result = ResponseFuture<Result<TakenLock, EngineError>>;

    fn handle(&mut self, msg: TakeLock, ctx: &mut Context<Self>) -> Self::Result {
        match self.lookup(&msg.key, &Owner::Lock) {
            Lookup::Free => {}
            Lookup::Mine(..) => {
                let key = msg.key;
                return Box::pin(async move {
                    Err(EngineError::Owned {
                        key,
                        owner: Owner::Lock,
                    })
                });
            }
            Lookup::Other(owner) => {
                let key = msg.key;
                return Box::pin(async move { Err(EngineError::Owned { key, owner }) });
            }
            Lookup::Wait(rx) => {
                // The previous tenure of this key is settling here (its release answered a
                // moment ago, as a rule): wait for it at most one request timeout, then try.
                let (engine, limit, key) = (ctx.address(), self.limit, msg.key.clone());
                return Box::pin(async move {
                    if tokio::time::timeout(limit, stopped(rx)).await.is_err() {
                        return Err(EngineError::Owned {
                            key,
                            owner: Owner::Lock,
                        });
                    }
                    engine
                        .send(msg)
                        .await
                        .map_err(|_| EngineError::ShuttingDown)?
                });
            }
        }
        let (reply, attempt) = oneshot::channel();
        let TakeLock {
            key,
            config,
            listener,
            belief,
        } = msg;
        let new = NewActor {
            key,
            owner: Owner::Lock,
            config,
            listener,
            belief,
        };
        let started = self.spawn_actor(new, ctx, |actor| actor.set_attempt(reply));
        Box::pin(async move {
            let (addr, belief) = started?;
            addr.do_send(TryLock);
            Ok((addr, belief, attempt))
        })
    }
}

/// Keep `0` until the actor stops (the facade's local queue permit of a granted lock, so the
/// next local waiter starts only once this tenure has ended and settled).
pub struct KeepUntilStopped(pub Box<dyn Any + Send>);

impl Message for KeepUntilStopped {
    type Result = ();
}

impl std::fmt::Debug for KeepUntilStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeepUntilStopped")
    }
}

impl Handler<KeepUntilStopped> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: KeepUntilStopped, _ctx: &mut Context<Self>) {
        self.keep(Some(msg.0));
    }
}

/// A lock actor's single attempt (sent by [`TakeLock`]).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct TryLock;

impl Handler<TryLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: TryLock, ctx: &mut Context<Self>) {
        self.feed(Event::SetAutoRenew(false), ctx);
        self.feed(Event::TryOnce, ctx);
    }
}

/// Renew the lock's tenure `token` now; the answer comes on `reply` ([`RenewAnswer::Lost`] at
/// once when that tenure is not the live one).
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct RenewLockNow {
    /// The tenure the caller believes in.
    pub token: FencingToken,
    /// The answer.
    pub reply: oneshot::Sender<RenewAnswer>,
}

impl Handler<RenewLockNow> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: RenewLockNow, ctx: &mut Context<Self>) {
        if !self.belief().holds_token(msg.token) {
            let _ = msg.reply.send(RenewAnswer::Lost);
            return;
        }
        self.add_renewal(msg.reply);
        self.feed(Event::RenewNow, ctx);
    }
}

/// Release the lock's tenure `token`, not before `not_before` (a minimum hold), then stop the
/// actor. The tenure ends here at once; `reply` (if any) gets the store's answer to the release,
/// or `NotHeld` at once when that tenure had already ended.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct UnlockLock {
    /// The tenure the caller believes in.
    pub token: FencingToken,
    /// Keep the grant until then (local monotonic clock).
    pub not_before: Option<Instant>,
    /// The store's answer.
    pub reply: Option<oneshot::Sender<Result<ReleaseOutcome, StoreFailure>>>,
}

impl Handler<UnlockLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, msg: UnlockLock, ctx: &mut Context<Self>) {
        if !self.belief().holds_token(msg.token) {
            // A tenure given up before this request (its guard dropped, unlocked) was not lost:
            // the reply is dropped unanswered, and the caller, finding it given up, says so.
            if let Some(reply) = msg.reply
                && !self.belief().was_given_up(msg.token)
            {
                let _ = reply.send(Ok(ReleaseOutcome::NotHeld));
            }
            // Whatever is left (a tenure past its deadline) is ended and settled.
            self.set_single_use(true);
            self.feed(Event::Stop, ctx);
            return;
        }
        self.set_unlock(msg.reply);
        match msg.not_before {
            Some(at) => self.feed(Event::ReleaseNotBefore(at), ctx),
            None => self.feed(Event::Release, ctx),
        }
    }
}

/// Someone of this service waits for the lock `key` (a new attempt or wait found it busy
/// locally): if the lock's actor holds no tenure and the release of its last one failed and
/// waits for its backoff, that release is sent again now, so a lock released while the database
/// was unreachable is free as soon as the database answers again, not a retry interval later.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct SettleLock {
    /// The lock.
    pub key: LeaseKey,
}

impl Handler<SettleLock> for LeaseEngine {
    type Result = ();
    fn handle(&mut self, msg: SettleLock, _ctx: &mut Context<Self>) {
        if let Some(entry) = self
            .book
            .get(&msg.key)
            .filter(|e| matches!(e.owner, Owner::Lock | Owner::Hold) && !e.belief.holds())
        {
            entry.addr.do_send(SettleNow);
        }
    }
}

/// Feeds [`leasehold_core::Event::SettleNow`] to a lock's actor (sent by [`SettleLock`]).
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub(crate) struct SettleNow;

impl Handler<SettleNow> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: SettleNow, ctx: &mut Context<Self>) {
        self.feed(Event::SettleNow, ctx);
    }
}

/// Turn a lock into a hold: renewed by itself (every ttl/3), competing again after a loss.
#[derive(Debug, Clone, Copy, Message)]
#[rtype(result = "()")]
pub struct HoldLock;

impl Handler<HoldLock> for LeaseActor {
    type Result = ();
    fn handle(&mut self, _: HoldLock, ctx: &mut Context<Self>) {
        self.set_single_use(false);
        self.feed(Event::SetCompete(true), ctx);
        self.feed(Event::SetAutoRenew(true), ctx);
    }
}

/// Turn the lock actor of `key` into a hold in the book ([`Owner::Hold`]) and tell it
/// ([`HoldLock`]). Answers whether the key was a lock of this service.
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct MakeHold {
    /// The lock.
    pub key: LeaseKey,
}

impl Handler<MakeHold> for LeaseEngine {
    type Result = bool;
    fn handle(&mut self, msg: MakeHold, _ctx: &mut Context<Self>) -> bool {
        match self.book.get_mut(&msg.key) {
            Some(e) if e.owner == Owner::Lock => {
                e.owner = Owner::Hold;
                e.addr.do_send(HoldLock);
                true
            }
            _ => false,
        }
    }
}

/// The actor, belief and owner of the lock or hold of `key` of this service, if any (one that
/// is stopping counts: it is being released).
#[derive(Debug, Message)]
#[rtype(result = "Option<(Addr<LeaseActor>, Arc<Belief>, Owner)>")]
pub struct FindLock {
    /// The lock.
    pub key: LeaseKey,
}

impl Handler<FindLock> for LeaseEngine {
    type Result = Option<(Addr<LeaseActor>, Arc<Belief>, Owner)>;
    fn handle(&mut self, msg: FindLock, _ctx: &mut Context<Self>) -> Self::Result {
        self.book
            .get(&msg.key)
            .filter(|e| matches!(e.owner, Owner::Lock | Owner::Hold))
            .map(|e| (Addr::clone(&e.addr), Arc::clone(&e.belief), e.owner.clone()))
    }
}

/// The held locks in `namespace` whose names start with `prefix`.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<LeaseRecord>, StoreError>")]
pub struct ListLocks {
    /// The namespace.
    pub namespace: Namespace,
    /// The name prefix (wildcards match only themselves).
    pub prefix: String,
}

impl Handler<ListLocks> for LeaseEngine {
    type Result = ResponseFuture<Result<Vec<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ListLocks, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("list_valid", self.limit, async move {
            store.list_valid(Some(&msg.namespace), &msg.prefix).await
        }))
    }
}

/// Watch for releases of `key` announced by any process (PostgreSQL `LISTEN`, one listener per
/// service on a connection of its own). Answers `None` on other backends (waiters poll).
#[derive(Debug, Message)]
#[rtype(result = "Option<mpsc::Receiver<()>>")]
pub struct WatchReleases {
    /// The lock.
    pub key: LeaseKey,
}

impl Handler<WatchReleases> for LeaseEngine {
    type Result = Option<mpsc::Receiver<()>>;

    fn handle(&mut self, msg: WatchReleases, _ctx: &mut Context<Self>) -> Self::Result {
        Some(self.bell.as_ref()?.watch(&msg.key))
    }
}

/// Open a [`FencedTransaction`] for the tenure `token` of `key` on the engine's store
/// (see [`leasehold_storage::SeaOrmStore::begin_fenced`]) on the engine's SQL store
/// ([`crate::LeaseEngine::with_sql_store`]); an error when it has none. Bounded by the request
/// timeout.
#[derive(Debug, Message)]
#[rtype(result = "Result<Option<FencedTransaction>, StoreError>")]
pub struct BeginFenced {
    /// The lock.
    pub key: LeaseKey,
    /// The tenure.
    pub token: FencingToken,
}

impl Handler<BeginFenced> for LeaseEngine {
    type Result = ResponseFuture<Result<Option<FencedTransaction>, StoreError>>;

    fn handle(&mut self, msg: BeginFenced, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.sql.clone();
        let holder = self.holder.clone();
        Box::pin(detached("begin_fenced", self.limit, async move {
            let Some(store) = store else {
                return Err(StoreError::Unexpected {
                    op: "begin_fenced",
                    detail: "the service has no SQL store (build it from a URL, or with LeaseService::from_sql_store)".to_owned(),
                });
            };
            store.begin_fenced(&msg.key, &holder, msg.token).await
        }))
    }
}
