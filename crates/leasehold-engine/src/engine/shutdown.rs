//! Shutdown: every tenure ends, every actor stops, and exactly the tenures held are released.

use std::sync::Arc;

use actix::prelude::*;
use futures::future::join_all;
use leasehold_storage::StoreError;

#[cfg(feature = "known-bugs")]
use super::KnownBug;
use super::{Entry, LeaseEngine, stopped};
use crate::detached::detached;
use crate::protocol::*;

/// At shutdown, the released keys are rung one by one up to this many (beyond, waiters poll).
const DOORBELL_RINGS_AT_SHUTDOWN: usize = 1_000;

impl Handler<ShutdownAll> for LeaseEngine {
    type Result = ResponseFuture<Result<u64, StoreError>>;

    fn handle(&mut self, _: ShutdownAll, _ctx: &mut Context<Self>) -> Self::Result {
        #[cfg(feature = "known-bugs")]
        if self.bug == Some(KnownBug::ShutdownReleasesByHolder) {
            return self.shut_down_by_holder();
        }
        self.shut_down = true;
        self.service.cancel();
        self.registry.clear();
        for entry in self.book.values() {
            entry.belief.finish();
        }
        let doorbell = self.doorbell.clone();
        let actors: Vec<_> = self.book.values().map(|e| Addr::clone(&e.addr)).collect();
        let settled: Vec<_> = self.book.values_mut().map(Entry::on_stop).collect();
        let (store, holder, limit) = (Arc::clone(&self.store), self.holder.clone(), self.limit);
        Box::pin(async move {
            let held: Vec<_> = join_all(actors.iter().map(|a| a.send(AbandonLease)))
                .await
                .into_iter()
                .filter_map(|r| r.ok().flatten())
                .collect();
            // Acquires in flight settle (a late grant is released) within one request timeout.
            let settling = tokio::time::timeout(limit, join_all(settled.into_iter().map(stopped)));
            if held.is_empty() {
                let _ = settling.await;
                if let Some(doorbell) = doorbell {
                    doorbell.stop();
                }
                return Ok(0);
            }
            tracing::trace!(
                holder = holder.as_str(),
                tenures = held.len(),
                "release_many"
            );
            // One statement per few thousand rows: the bound grows with the batch.
            let chunks = u32::try_from(held.len() / 1000).unwrap_or(u32::MAX);
            let limit = limit.saturating_mul(chunks.saturating_add(1));
            let items = held.clone();
            let n = detached("release_many", limit, async move {
                store.release_many(&holder, &items).await
            })
            .await;
            // Rung after the release committed: one ring per key for a few keys (on MySQL,
            // stopping lets every named lock go at once anyway).
            // Awaited (bounded): the engine's runtime ends right after shutdown.
            if let Some(doorbell) = doorbell {
                if n.is_ok() && held.len() <= DOORBELL_RINGS_AT_SHUTDOWN {
                    let rings = join_all(held.iter().map(|item| doorbell.ring_now(&item.key)));
                    let _ = tokio::time::timeout(limit, rings).await;
                }
                doorbell.stop();
            }
            let _ = settling.await;
            let n = n?;
            tracing::info!(event = "shut_down", released = n, "shut down");
            Ok(n)
        })
    }
}

#[cfg(feature = "known-bugs")]
impl LeaseEngine {
    /// `KnownBug::ShutdownReleasesByHolder`: abandon the tasks, leave the locks' guards
    /// believing, and release every row of the holder id.
    fn shut_down_by_holder(&mut self) -> ResponseFuture<Result<u64, StoreError>> {
        self.shut_down = true;
        self.registry.clear();
        let actors: Vec<_> = self
            .book
            .values()
            .filter(|e| !matches!(e.owner, Owner::Lock | Owner::Hold))
            .map(|e| Addr::clone(&e.addr))
            .collect();
        let (admin, holder) = (self.admin.clone(), self.holder.clone());
        Box::pin(async move {
            join_all(actors.iter().map(|a| a.send(AbandonLease))).await;
            let released = match admin {
                Some(admin) => admin.release_all(&holder).await,
                None => Err(super::reads::no_admin_store("release_all")),
            };
            // The guards live on, until their own deadline timers.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            released
        })
    }
}
