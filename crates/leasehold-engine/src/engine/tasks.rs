//! Lease tasks on the engine: start (one or many), stop, list, find, yield.

use std::sync::Arc;

use actix::prelude::*;
use futures::future::join_all;
use leasehold_core::LeaseKey;

use super::{First, LeaseEngine, Lookup, NewActor, stopped};
use crate::belief::Belief;
use crate::protocol::*;

impl Handler<StartTask> for LeaseEngine {
    type Result = ResponseFuture<Result<(Arc<Belief>, bool), EngineError>>;

    fn handle(&mut self, msg: StartTask, ctx: &mut Context<Self>) -> Self::Result {
        match self.lookup(&msg.key, &msg.owner) {
            Lookup::Mine(belief) => Box::pin(async move { Ok((belief, false)) }),
            Lookup::Other(owner) => {
                let key = msg.key;
                Box::pin(async move { Err(EngineError::Owned { key, owner }) })
            }
            Lookup::Wait(rx) => {
                let engine = ctx.address();
                Box::pin(async move {
                    stopped(rx).await;
                    engine
                        .send(msg)
                        .await
                        .map_err(|_| EngineError::ShuttingDown)?
                })
            }
            Lookup::Free => {
                let value = msg.value;
                let dispatch = msg.dispatch;
                let new = NewActor {
                    key: msg.key,
                    owner: msg.owner,
                    config: msg.config,
                    listener: msg.listener,
                    belief: msg.belief,
                    dispatch,
                    first: if msg.compete {
                        First::Compete
                    } else {
                        First::StandBy
                    },
                };
                let started = self.spawn_actor(new, ctx, |a| a.set_grant_value(value));
                Box::pin(async move {
                    let (_, belief) = started?;
                    Ok((belief, true))
                })
            }
        }
    }
}

impl Handler<StartTasks> for LeaseEngine {
    type Result = ResponseFuture<Result<Vec<(Arc<Belief>, bool)>, EngineError>>;

    fn handle(&mut self, msg: StartTasks, ctx: &mut Context<Self>) -> Self::Result {
        if let Some(err) = msg.0.iter().find_map(|start| {
            match self.book.get(&start.key) {
                // A stopping entry is waited for, as by a single start.
                Some(e) if !e.stopping && e.owner != start.owner => Some(EngineError::Owned {
                    key: start.key.clone(),
                    owner: e.owner.clone(),
                }),
                _ => None,
            }
        }) {
            return Box::pin(async move { Err(err) });
        }
        let started: Vec<_> = msg
            .0
            .into_iter()
            .map(|start| <Self as Handler<StartTask>>::handle(self, start, ctx))
            .collect();
        Box::pin(async move { join_all(started).await.into_iter().collect() })
    }
}

impl Handler<StopTask> for LeaseEngine {
    type Result = ResponseFuture<bool>;

    fn handle(&mut self, msg: StopTask, _ctx: &mut Context<Self>) -> Self::Result {
        match self.stop_entry(&msg.key, &msg.owner) {
            None => Box::pin(async { false }),
            Some(rx) => Box::pin(async move {
                stopped(rx).await;
                true
            }),
        }
    }
}

impl Handler<ListTasks> for LeaseEngine {
    type Result = Vec<LeaseKey>;

    fn handle(&mut self, msg: ListTasks, _ctx: &mut Context<Self>) -> Vec<LeaseKey> {
        self.book
            .iter()
            .filter(|(_, e)| e.owner == msg.owner && !e.stopping)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

impl Handler<FindTask> for LeaseEngine {
    type Result = Option<Arc<Belief>>;

    fn handle(&mut self, msg: FindTask, _ctx: &mut Context<Self>) -> Self::Result {
        self.book
            .get(&msg.key)
            .filter(|e| e.owner == msg.owner && !e.stopping)
            .map(|e| Arc::clone(&e.belief))
    }
}

impl Handler<YieldTask> for LeaseEngine {
    type Result = ResponseFuture<Option<Option<leasehold_core::FencingToken>>>;

    fn handle(&mut self, msg: YieldTask, _ctx: &mut Context<Self>) -> Self::Result {
        let addr = self
            .book
            .get(&msg.key)
            .filter(|e| e.owner == msg.owner && !e.stopping)
            .map(|e| Addr::clone(&e.addr));
        Box::pin(async move {
            let addr = addr?;
            Some(addr.send(YieldLease).await.ok().flatten())
        })
    }
}
