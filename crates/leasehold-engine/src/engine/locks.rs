//! Locks on the engine: a lock is a lease actor whose machine takes one attempt, renews on
//! request and stops once its tenure has ended and settled. A hold is a lock switched to
//! automatic renewal. Also: prefix listings, release watches and fenced transactions.
//!
//! Every store call runs on the engine's runtime, bounded by the request timeout.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_storage::{FencedTransaction, StoreError};
use tokio::sync::{mpsc, oneshot};

use super::{First, LeaseEngine, Lookup, NewActor, stopped};
use crate::actor::{GrantRoute, LeaseActor};
use crate::belief::Belief;
use crate::detached::detached;
use crate::joint::JointGrant;
use crate::protocol::*;

/// What [`TakeLock`] answers: the lock's actor, its [`Belief`] and the receiver of its
/// [`Attempt`].
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
            dispatch,
        } = msg;
        let new = NewActor {
            key,
            owner: Owner::Lock,
            config,
            listener,
            belief,
            first: First::TryOnce,
            dispatch,
        };
        let started = self.spawn_actor(new, ctx, |actor| actor.set_attempt(reply));
        Box::pin(async move {
            let (addr, belief) = started?;
            Ok((addr, belief, attempt))
        })
    }
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

impl Handler<MakeHold> for LeaseEngine {
    type Result = bool;
    fn handle(&mut self, msg: MakeHold, _ctx: &mut Context<Self>) -> bool {
        match self.book.get_mut(&msg.key) {
            Some(e) if e.owner == Owner::Lock => {
                e.owner = Owner::Hold;
                e.addr.do_send(HoldLock {
                    compete_after_loss: msg.compete_after_loss,
                });
                true
            }
            _ => false,
        }
    }
}

impl Message for FindLock {
    type Result = Option<(Addr<LeaseActor>, Arc<Belief>, Owner)>;
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

impl Handler<WatchReleases> for LeaseEngine {
    type Result = Option<mpsc::Receiver<()>>;

    fn handle(&mut self, msg: WatchReleases, _ctx: &mut Context<Self>) -> Self::Result {
        Some(self.doorbell.as_ref()?.watch(&msg.key))
    }
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

impl Message for TakeLocks {
    type Result = Result<Vec<TakenLock>, EngineError>;
}

impl Handler<TakeLocks> for LeaseEngine {
    type Result = Result<Vec<TakenLock>, EngineError>;

    fn handle(&mut self, msg: TakeLocks, ctx: &mut Context<Self>) -> Self::Result {
        for key in &msg.keys {
            match self.lookup(key, &Owner::Lock) {
                Lookup::Free => {}
                // Ours already, or a previous tenure still settling: the caller tries again.
                Lookup::Mine(..) | Lookup::Wait(_) => {
                    return Err(EngineError::Owned {
                        key: key.clone(),
                        owner: Owner::Lock,
                    });
                }
                Lookup::Other(owner) => {
                    return Err(EngineError::Owned {
                        key: key.clone(),
                        owner,
                    });
                }
            }
        }
        let mut sorted = msg.keys.clone();
        sorted.sort();
        let joint = Arc::new(GrantRoute::Joint(JointGrant::new(
            self.store(),
            self.holder.clone(),
            sorted,
            msg.config.request_timeout(),
        )));
        let mut taken = Vec::with_capacity(msg.keys.len());
        for (key, belief) in msg.keys.into_iter().zip(msg.beliefs) {
            let (reply, attempt) = oneshot::channel();
            let new = NewActor {
                key,
                owner: Owner::Lock,
                config: msg.config.clone(),
                listener: Arc::new(|_, _| {}),
                belief: Some(belief),
                first: First::TryOnce,
                dispatch: msg.dispatch.clone(),
            };
            let joint = Arc::clone(&joint);
            let spawned = self.spawn_actor(new, ctx, |actor| {
                actor.set_attempt(reply);
                actor.route_grants(joint);
            });
            match spawned {
                Ok((addr, belief)) => taken.push((addr, belief, attempt)),
                Err(e) => {
                    // Those made have not run yet (they run on this thread once this handler
                    // returns): stopped, they settle their share of a grant that never goes
                    // out (the others never ask), and nothing is granted.
                    for (addr, _, _) in &taken {
                        addr.do_send(StopLease { done: None });
                    }
                    return Err(e);
                }
            }
        }
        Ok(taken)
    }
}
