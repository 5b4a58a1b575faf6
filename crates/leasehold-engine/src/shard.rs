//! The engine's side of sharded lease tasks: switch tasks between competing and standby as the
//! ring moves, list the live members, ring and watch a group's bell (its membership changed, or
//! names were given up), and wake the tasks that wait to apply. Sharded names start through
//! [`StartTask`](crate::StartTask) with [`Owner::Shard`](crate::Owner::Shard).

use actix::prelude::*;
use leasehold_core::{LeaseKey, LeaseRecord, Namespace};
use leasehold_storage::StoreError;

use tokio::sync::mpsc;

use crate::actor::{CompeteLease, StandByLease, WakeLease};
use crate::detached::detached;
use crate::engine::{LeaseEngine, Owner};

/// Switch the running names of `owner` between competing (`true`) and standby (`false`: a
/// held lease ends at once and is released). Keys not run by `owner` are skipped. Answers how
/// many were switched.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct SetCompeting {
    /// Who runs them.
    pub owner: Owner,
    /// The leases and whether to compete for each.
    pub changes: Vec<(LeaseKey, bool)>,
}

/// List the live leases in `namespace` whose names start with `prefix`, by the database's
/// clock ([`LeaseStore::list_valid`](leasehold_storage::LeaseStore::list_valid)), bounded by the
/// request timeout.
#[derive(Debug, Message)]
#[rtype(result = "Result<Vec<LeaseRecord>, StoreError>")]
pub struct ListLive {
    /// The namespace.
    pub namespace: Namespace,
    /// The name prefix (wildcards match only themselves).
    pub prefix: String,
}

/// Wake the watchers of `key` in every process: a bell that is no tenure, such as a shard
/// group's ([`leasehold_storage::Doorbell::broadcast`]). Answers whether the service has a
/// doorbell (without one, nothing is sent and the watchers see the change at their refresh).
#[derive(Debug, Message)]
#[rtype(result = "bool")]
pub struct Broadcast {
    /// The bell.
    pub key: LeaseKey,
}

/// Wake-ups whenever any process broadcasts `key`
/// ([`leasehold_storage::Doorbell::watch_broadcasts`]); `None` without a doorbell.
#[derive(Debug, Message)]
#[rtype(result = "Option<mpsc::Receiver<()>>")]
pub struct WatchBroadcasts {
    /// The bell.
    pub key: LeaseKey,
}

/// Tell the tasks of `owner` among `keys` that their holder may have let go: a task waiting to
/// apply applies now ([`leasehold_core::Event::Wake`]; the machine ignores it in any other
/// state). Keys not run by `owner` are skipped. Answers how many were told.
#[derive(Debug, Message)]
#[rtype(result = "usize")]
pub struct WakeTasks {
    /// Who runs them.
    pub owner: Owner,
    /// The leases.
    pub keys: Vec<LeaseKey>,
}

impl Handler<Broadcast> for LeaseEngine {
    type Result = bool;

    fn handle(&mut self, msg: Broadcast, _ctx: &mut Context<Self>) -> bool {
        let Some(bell) = &self.bell else {
            return false;
        };
        bell.broadcast(&msg.key);
        true
    }
}

impl Handler<WatchBroadcasts> for LeaseEngine {
    type Result = Option<mpsc::Receiver<()>>;

    fn handle(&mut self, msg: WatchBroadcasts, _ctx: &mut Context<Self>) -> Self::Result {
        Some(self.bell.as_ref()?.watch_broadcasts(&msg.key))
    }
}

impl Handler<WakeTasks> for LeaseEngine {
    type Result = usize;

    fn handle(&mut self, msg: WakeTasks, _ctx: &mut Context<Self>) -> usize {
        let mut woken = 0;
        for key in msg.keys {
            if let Some(entry) = self.book.get(&key).filter(|e| e.owner == msg.owner) {
                entry.addr.do_send(WakeLease);
                woken += 1;
            }
        }
        woken
    }
}

impl Handler<SetCompeting> for LeaseEngine {
    type Result = usize;

    fn handle(&mut self, msg: SetCompeting, _ctx: &mut Context<Self>) -> usize {
        let mut switched = 0;
        for (key, compete) in msg.changes {
            let Some(entry) = self.book.get(&key).filter(|e| e.owner == msg.owner) else {
                continue;
            };
            if compete {
                entry.addr.do_send(CompeteLease);
            } else {
                entry.addr.do_send(StandByLease);
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
        Box::pin(detached("list_valid", self.limit, async move {
            store.list_valid(Some(&msg.namespace), &msg.prefix).await
        }))
    }
}
