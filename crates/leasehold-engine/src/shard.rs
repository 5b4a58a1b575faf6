//! The engine's side of sharded lease tasks: switch tasks between competing and standby as the
//! ring moves, and list the live members. Sharded names start through
//! [`StartTask`](crate::StartTask) with [`Owner::Shard`](crate::Owner::Shard).

use actix::prelude::*;
use leasehold_core::{LeaseKey, LeaseRecord, Namespace};
use leasehold_storage::StoreError;

use crate::actor::{CompeteLease, StandByLease};
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
