//! The engine's side of sharded lease tasks: start a task idle or competing, switch tasks
//! between competing and standby as the ring moves, and list the live members.

use actix::prelude::*;
use leasehold_core::{LeaseConfig, LeaseKey, LeaseRecord, Namespace, ValidationError};
use leasehold_storage::StoreError;

use crate::actor::{CompeteLease, Listener, StandByLease, StartLease};
use crate::engine::LeaseEngine;

/// Start a lease task for `key` unless one is running, competing at once when `compete`, else
/// in standby until [`SetCompeting`] says otherwise. Answers `Ok(true)` if started.
#[derive(Message)]
#[rtype(result = "Result<bool, ValidationError>")]
pub struct StartShardTask {
    /// The lease.
    pub key: LeaseKey,
    /// Its configuration.
    pub config: LeaseConfig,
    /// Told about its notifications.
    pub listener: Listener,
    /// Whether this host competes for it now.
    pub compete: bool,
}

impl std::fmt::Debug for StartShardTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartShardTask")
            .field("key", &self.key)
            .field("compete", &self.compete)
            .finish_non_exhaustive()
    }
}

/// Switch running tasks between competing (`true`) and standby (`false`: a held lease is
/// released). Keys without a running task are skipped. Answers how many were switched.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct SetCompeting {
    /// The leases and whether to compete for each.
    pub changes: Vec<(LeaseKey, bool)>,
}

/// List the live leases in `namespace` whose names start with `prefix`, by the database's
/// clock ([`LeaseStore::list_valid`](leasehold_storage::LeaseStore::list_valid)).
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<LeaseRecord>, StoreError>")]
pub struct ListLive {
    /// The namespace.
    pub namespace: Namespace,
    /// The name prefix (wildcards match only themselves).
    pub prefix: String,
}

impl Handler<StartShardTask> for LeaseEngine {
    type Result = Result<bool, ValidationError>;

    fn handle(&mut self, msg: StartShardTask, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(addr) = self.spawn_actor(msg.key, &msg.config, msg.listener)? else {
            return Ok(false);
        };
        if msg.compete {
            addr.do_send(StartLease);
        } else {
            addr.do_send(StandByLease);
        }
        Ok(true)
    }
}

impl Handler<SetCompeting> for LeaseEngine {
    type Result = usize;

    fn handle(&mut self, msg: SetCompeting, _ctx: &mut Context<Self>) -> usize {
        let mut switched = 0;
        for (key, compete) in msg.changes {
            let Some(addr) = self.task(&key) else {
                continue;
            };
            if compete {
                addr.do_send(CompeteLease);
            } else {
                addr.do_send(StandByLease);
            }
            switched += 1;
        }
        switched
    }
}

impl Handler<ListLive> for LeaseEngine {
    type Result = ResponseFuture<Result<Vec<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ListLive, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(async move { store.list_valid(Some(&msg.namespace), &msg.prefix).await })
    }
}
