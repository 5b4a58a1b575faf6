//! The engine's book: `key -> (owner, actor, belief)`, one entry per running actor, kept until
//! that actor has stopped.

use std::sync::Arc;

use actix::prelude::*;
use leasehold_core::{LeaseConfig, LeaseKey};
use leasehold_storage::LeaseStore;
use tokio::sync::oneshot;

use super::LeaseEngine;
use crate::actor::LeaseActor;
use crate::belief::Belief;
use crate::protocol::*;

/// One entry of the book: the owner, the actor, and whether it is stopping.
pub(crate) struct Entry {
    pub(crate) owner: Owner,
    /// Shared with the actor's slot in the engine's alarms (one actix sender for both).
    pub(crate) addr: Arc<Addr<LeaseActor>>,
    pub(crate) belief: Arc<Belief>,
    pub(crate) id: u64,
    pub(crate) stopping: bool,
    /// Told (by being dropped with the entry) once the actor has stopped. An empty `Vec` costs
    /// no allocation, unlike a watch channel per actor (about 350 bytes).
    pub(crate) waiters: Vec<oneshot::Sender<()>>,
}

impl Entry {
    /// A receiver told when this entry's actor has stopped.
    pub(crate) fn on_stop(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.waiters.retain(|w| !w.is_closed());
        self.waiters.push(tx);
        rx
    }
}

/// What a new actor of the book is made of.
pub(crate) struct NewActor {
    pub(crate) key: LeaseKey,
    pub(crate) owner: Owner,
    pub(crate) config: LeaseConfig,
    pub(crate) listener: Listener,
    pub(crate) belief: Option<Arc<Belief>>,
    /// What it does first.
    pub(crate) first: First,
    /// Whoever asked for it: its `lease` span is made under this dispatcher.
    pub(crate) dispatch: tracing::Dispatch,
}

/// What a new actor does first: its first message, sent by [`LeaseEngine::spawn_actor`] right
/// after the spawn, before anyone else holds its address (so it comes before any other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum First {
    /// Compete ([`StartLease`]): a lease task.
    Compete,
    /// Wait on standby ([`StandByLease`]): a sharded name the ring assigns elsewhere.
    StandBy,
    /// Take one attempt ([`TryLock`]): a lock, or a part of a multi-lock.
    TryOnce,
}

/// The book's answer for a start.
pub(crate) enum Lookup {
    Free,
    Mine(Arc<Belief>),
    Other(Owner),
    /// The key's actor is stopping: wait for this, then look again.
    Wait(oneshot::Receiver<()>),
}

/// Waits until the actor of a stop signal has stopped (its entry left the book).
pub(crate) async fn stopped(rx: oneshot::Receiver<()>) {
    let _ = rx.await;
}

impl LeaseEngine {
    /// The actor of the running (not stopping) task of `key` run by `owner`, if any.
    pub(crate) fn running(&self, key: &LeaseKey, owner: &Owner) -> Option<Addr<LeaseActor>> {
        self.book
            .get(key)
            .filter(|e| e.owner == *owner && !e.stopping)
            .map(|e| Addr::clone(&e.addr))
    }

    /// What the book says about `key` for a new start by `owner`: [`Lookup::Free`], `Mine`
    /// when `owner` itself runs it, `Other` when another owner does; a stopping entry answers
    /// its stop signal in `Wait`.
    pub(crate) fn lookup(&mut self, key: &LeaseKey, owner: &Owner) -> Lookup {
        match self.book.get_mut(key) {
            None => Lookup::Free,
            Some(e) if e.stopping => Lookup::Wait(e.on_stop()),
            Some(e) if &e.owner == owner => Lookup::Mine(Arc::clone(&e.belief)),
            Some(e) => Lookup::Other(e.owner.clone()),
        }
    }

    /// Marks `key` as stopping and sends the stop; answers the stop signal. `None` when the key
    /// is not owned by `owner`.
    pub(crate) fn stop_entry(
        &mut self,
        key: &LeaseKey,
        owner: &Owner,
    ) -> Option<oneshot::Receiver<()>> {
        let entry = self.book.get_mut(key).filter(|e| &e.owner == owner)?;
        if !entry.stopping {
            entry.stopping = true;
            entry.addr.do_send(StopLease { done: None });
        }
        Some(entry.on_stop())
    }

    /// The store requests go to.
    pub(crate) fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::clone(&self.store)
    }
}

impl Handler<ActorStopped> for LeaseEngine {
    type Result = ();
    fn handle(&mut self, msg: ActorStopped, _ctx: &mut Context<Self>) {
        if self.book.get(&msg.key).is_some_and(|e| e.id == msg.id) {
            self.book.remove(&msg.key);
        }
    }
}
