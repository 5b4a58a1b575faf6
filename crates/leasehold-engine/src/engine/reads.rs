//! Store reads on the engine's runtime, each bounded: one row, the store's clock, purges, the
//! namespaces used, and observers of one name.

use actix::prelude::*;
use leasehold_core::{DbInstant, LeaseRecord};
use leasehold_storage::StoreError;
use leasehold_storage::observe::LeaseObserver;

use super::LeaseEngine;
use crate::detached::detached;
use crate::protocol::*;

impl Handler<ReadRecord> for LeaseEngine {
    type Result = ResponseFuture<Result<Option<LeaseRecord>, StoreError>>;

    fn handle(&mut self, msg: ReadRecord, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("get", self.limit, async move {
            store.get(&msg.key).await
        }))
    }
}

impl Handler<ReadDbNow> for LeaseEngine {
    type Result = ResponseFuture<Result<DbInstant, StoreError>>;

    fn handle(&mut self, _: ReadDbNow, _ctx: &mut Context<Self>) -> Self::Result {
        let store = self.store();
        Box::pin(detached("db_now", self.limit, async move {
            store.db_now().await
        }))
    }
}

impl Handler<PurgeRows> for LeaseEngine {
    type Result = ResponseFuture<Result<u64, StoreError>>;

    fn handle(&mut self, msg: PurgeRows, _ctx: &mut Context<Self>) -> Self::Result {
        let Some(admin) = self.admin.clone() else {
            return Box::pin(std::future::ready(Err(no_admin_store("purge"))));
        };
        Box::pin(detached("purge", msg.limit, async move {
            admin.purge(msg.namespace.as_ref(), msg.older_than).await
        }))
    }
}

/// The answer of an operator's call on an engine given no [`AdminStore`](leasehold_storage::AdminStore).
pub(super) fn no_admin_store(op: &'static str) -> StoreError {
    StoreError::Unexpected {
        op,
        detail: "the engine has no admin store (LeaseEngine::with_admin_store)".to_owned(),
    }
}

impl Handler<UsedNamespaces> for LeaseEngine {
    type Result = Vec<leasehold_core::Namespace>;

    fn handle(&mut self, _: UsedNamespaces, _ctx: &mut Context<Self>) -> Self::Result {
        self.namespaces.iter().cloned().collect()
    }
}

impl Handler<ObserveLease> for LeaseEngine {
    type Result = MessageResult<ObserveLease>;

    fn handle(&mut self, msg: ObserveLease, _ctx: &mut Context<Self>) -> Self::Result {
        let (observer, driver) =
            LeaseObserver::new(self.store(), self.doorbell.clone(), msg.key, msg.options);
        let service = self.service.clone();
        actix::spawn(async move {
            let cancelled = std::pin::pin!(service.cancelled());
            let _ = futures::future::select(cancelled, driver).await;
        });
        MessageResult(observer)
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
